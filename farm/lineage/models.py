"""The lineage schema. Every artifact is keyed by its sha256; a row exists only once its bytes are
stored and verified (see farm/lineage/record.py). Migrations in migrations/ must match these models;
tests/test_migrations.py checks that they do not drift.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

SHA = String(64)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Toolchain(Base):
    """One toolchain environment, identified by the digest of its full `pip freeze`."""

    __tablename__ = "toolchains"

    id: Mapped[str] = mapped_column(SHA, primary_key=True)  # sha256 of the freeze text
    python_version: Mapped[str] = mapped_column(String(32))
    packages: Mapped[dict[str, Any]] = mapped_column(JSON)  # key packages -> version
    freeze: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Source(Base):
    """A model source: a local folder, a hub repo at a revision, or a generated test model."""

    __tablename__ = "sources"

    id: Mapped[str] = mapped_column(SHA, primary_key=True)  # digest of kind + identity + file hashes
    kind: Mapped[str] = mapped_column(String(16))  # local | hf | generated
    name: Mapped[str] = mapped_column(String(200))
    family: Mapped[str] = mapped_column(String(64))
    repo_id: Mapped[str | None] = mapped_column(String(200))
    revision: Mapped[str | None] = mapped_column(String(100))
    path: Mapped[str | None] = mapped_column(Text)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # the config's source block
    files: Mapped[list[Any]] = mapped_column(JSON)  # [{path, sha256, size}]
    tokenizer_sha256: Mapped[str | None] = mapped_column(SHA)
    # The source's own generation settings (end-of-sequence ids and where they were read from): the
    # PyTorch reference stops by these, never by the stop tokens of a bundle under test.
    generation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The host that first recorded it (its path is that host's: another host rebuilds the folder
    # from the store, farm/source_folder.py).
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Recipe(Base):
    __tablename__ = "recipes"

    digest: Mapped[str] = mapped_column(SHA, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)  # the pydantic recipe
    rendered: Mapped[list[Any]] = mapped_column(JSON)  # what the quantizer was given
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Artifact(Base):
    """A stored file: float_tflite, quantized_tflite, litertlm, tokenizer; an image build's tflite_part
    (embedder, vision encoder, adapter: float and quantized) and image_parts (the manifest naming a
    quantized decoder with its parts); cards."""

    __tablename__ = "artifacts"
    __table_args__ = (Index("ux_artifacts_chain_seq", "chain", "chain_seq", unique=True),)

    sha256: Mapped[str] = mapped_column(SHA, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    size: Mapped[int] = mapped_column(BigInteger)
    uri: Mapped[str] = mapped_column(Text)
    name: Mapped[str | None] = mapped_column(String(300), index=True)
    source_id: Mapped[str | None] = mapped_column(ForeignKey("sources.id"))
    toolchain_id: Mapped[str | None] = mapped_column(ForeignKey("toolchains.id"))
    recipe_digest: Mapped[str | None] = mapped_column(ForeignKey("recipes.digest"), index=True)
    # Stage-specific facts: export config for a float export, the quantization report (matched
    # exceptions, bytes per parameter), package metadata (stop tokens) for a bundle.
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    supersedes_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    # The version chain ("previous file"): a model id and variant for a farm-built bundle
    # ("tiny-qwen35/qwen35_wi8_float_gates"), "card/<model id>" for a card; None for an import.
    # (chain, chain_seq) is unique, so concurrent builds cannot fork a chain.
    chain: Mapped[str | None] = mapped_column(String(300))
    chain_seq: Mapped[int | None] = mapped_column(Integer)
    # The model a farm-built bundle or card belongs to (equality, not a range over `chain`: a
    # PostgreSQL collation that is not C does not order "a-b/…" and "a/…" bytewise).
    model_id: Mapped[str | None] = mapped_column(String(200), index=True)
    imported: Mapped[bool] = mapped_column(Boolean, default=False)
    # The host whose stage (or import) made and stored these bytes first (issue 35: a farm is many
    # hosts; `farm lineage` names the host of every stage, gate and device result).
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)

    source: Mapped[Source | None] = relationship()
    toolchain: Mapped[Toolchain | None] = relationship()
    recipe: Mapped[Recipe | None] = relationship()
    inputs: Mapped[list["ArtifactInput"]] = relationship(
        foreign_keys="ArtifactInput.artifact_sha256", order_by="ArtifactInput.role"
    )
    sections: Mapped[list["Section"]] = relationship(order_by="Section.idx")


class ArtifactLocation(Base):
    """Each store an artifact's bytes were put in (one lineage DB can see several: a local store and
    a bucket, an old bucket and a new one). `artifacts.uri` is only where it was first stored."""

    __tablename__ = "artifact_locations"

    artifact_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), primary_key=True)
    store_url: Mapped[str] = mapped_column(String(500), primary_key=True)
    uri: Mapped[str] = mapped_column(Text)
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ArtifactInput(Base):
    """Parent edges: a quantized model's float export, a bundle's model and tokenizer."""

    __tablename__ = "artifact_inputs"

    artifact_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), primary_key=True)
    role: Mapped[str] = mapped_column(String(32), primary_key=True)
    input_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), index=True)


class Section(Base):
    """A section of a .litertlm file, hashed on its own so shared sections are one query."""

    __tablename__ = "sections"

    artifact_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    type: Mapped[str] = mapped_column(String(64))
    offset: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(SHA)

    # (sha256, file): "which files carry this section" is an ordered index range, LIMIT-able.
    __table_args__ = (Index("ix_sections_sha256_artifact", "sha256", "artifact_sha256"),)


class StageCache(Base):
    """Content-keyed stage cache: (stage, key built from input hashes, config digest and toolchain)
    -> the artifact that stage produced. The farm's own cache, not Prefect's: it lives in the lineage
    DB that every worker shares, and a hit is only honoured when the store still holds the object."""

    __tablename__ = "stage_cache"

    stage: Mapped[str] = mapped_column(String(32), primary_key=True)
    cache_key: Mapped[str] = mapped_column(SHA, primary_key=True)
    output_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))
    seconds: Mapped[float] = mapped_column(default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class GateResult(Base):
    """One correctness gate run on the exact bytes of one artifact, with the runtime that ran it.
    A failure is data: it is recorded like a pass, and triggers a re-check of the siblings."""

    __tablename__ = "gate_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    artifact_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    gate: Mapped[str] = mapped_column(String(64))
    gate_version: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))  # pass | warn | fail | skipped | could_not_run
    runtime: Mapped[str] = mapped_column(String(64))  # e.g. litert-lm-api
    runtime_version: Mapped[str] = mapped_column(String(32))
    backend: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(128))  # the device id (local-cpu, a CPU-class device)
    # Where the runtime ran (issue 34): the host, the CPU class key its process saw (arch + the
    # dispatch features, farm_common/cpu_classes.py: part of the reuse key) and the whole view
    # (label, features, how it was presented: native | cpuid_mask | qemu).
    host: Mapped[str | None] = mapped_column(String(255))
    cpu_class: Mapped[str | None] = mapped_column(String(255))
    cpu: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # What the runtime answered per case ([{case, reply, error?}]), to set classes side by side.
    replies: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    evidence: Mapped[list[Any]] = mapped_column(JSON, default=list)
    findings: Mapped[list[Any]] = mapped_column(JSON, default=list)
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # the request: thresholds, prompts…
    # What was measured besides the target: {role: sha256 or source id} (bundle, float_export,
    # tokenizer, reference), and the digest of (request + those identities): the reuse key.
    inputs: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    request_digest: Mapped[str | None] = mapped_column(SHA, nullable=True)
    toolchain_id: Mapped[str | None] = mapped_column(ForeignKey("toolchains.id"))
    flow_run_id: Mapped[str | None] = mapped_column(String(64))
    recheck_id: Mapped[int | None] = mapped_column(ForeignKey("rechecks.id"), index=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("ix_gate_results_artifact_gate", "artifact_sha256", "gate"),
        Index("ix_gate_results_reuse", "artifact_sha256", "gate", "request_digest"),
        Index("ix_gate_results_reuse_class", "artifact_sha256", "gate", "request_digest", "cpu_class"),
    )


class Recheck(Base):
    """A gate failed on one artifact, so every sibling was re-checked with the gates of the same kind;
    the sibling results point here. The siblings follow the failure's cause (`basis`): the recipe
    digest when the float export passed and the bundle failed, the export configuration (family,
    converter options) when the float export or a fused-op graph failed."""

    __tablename__ = "rechecks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # No foreign key: gate_results.recheck_id already points here, and a cycle of FKs between the
    # two tables would need deferred constraints on every backend for no gain.
    trigger_result_id: Mapped[int] = mapped_column(Integer, index=True)
    recipe_digest: Mapped[str | None] = mapped_column(ForeignKey("recipes.digest"), index=True, nullable=True)
    basis: Mapped[str] = mapped_column(String(16), default="recipe")  # recipe | export_config | none
    basis_key: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the digest siblings share
    kind: Mapped[str] = mapped_column(String(32))
    siblings: Mapped[list[Any]] = mapped_column(JSON, default=list)  # sha256s re-checked
    flow_run_id: Mapped[str | None] = mapped_column(String(64))
    # One flow run per sibling re-check (started concurrently, under a concurrency limit).
    flow_run_ids: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DeviceResult(Base):
    """One benchmark of one file on one device and accelerator. Only these rows make a device
    "verified" for a file; a failure is recorded with its class from a closed taxonomy."""

    __tablename__ = "device_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    artifact_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    device_id: Mapped[str] = mapped_column(String(64), index=True)
    accelerator: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))  # verified | failed | does_not_fit
    failure_class: Mapped[str | None] = mapped_column(String(32))
    # The prompt and decode lengths are part of what a figure means: a record's identity.
    prefill_tokens: Mapped[int] = mapped_column(Integer)
    decode_tokens: Mapped[int] = mapped_column(Integer)
    runs: Mapped[int] = mapped_column(Integer)
    cache_mode: Mapped[str | None] = mapped_column(String(16))
    prefill_tokens_per_s: Mapped[float | None] = mapped_column()
    decode_tokens_per_s: Mapped[float | None] = mapped_column()
    ttft_ms: Mapped[float | None] = mapped_column()
    init_ms: Mapped[float | None] = mapped_column()
    peak_mem_mb: Mapped[float | None] = mapped_column()
    delegated_ops: Mapped[int | None] = mapped_column(Integer)
    total_ops: Mapped[int | None] = mapped_column(Integer)
    full_delegation: Mapped[bool | None] = mapped_column(Boolean)
    context_length: Mapped[int | None] = mapped_column(Integer)
    runtime: Mapped[str | None] = mapped_column(String(64))
    runtime_version: Mapped[str | None] = mapped_column(String(32))
    env: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    host: Mapped[str | None] = mapped_column(String(255))
    cpu_class: Mapped[str | None] = mapped_column(String(255))  # as for gate results: the class key
    cpu: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    evidence: Mapped[list[Any]] = mapped_column(JSON, default=list)
    protocol: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    flow_run_id: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_device_results_artifact_device", "artifact_sha256", "device_id"),)


class Lease(Base):
    """Who is making something right now (a stage output, a gate measurement), so identical
    concurrent builds make it once: the first to insert the row holds it, the others wait for it to
    go and then take the holder's recorded result. The holder renews `heartbeat_at` (the database's
    clock) while it works; a lease silent past the bound, or whose holder process is gone (same
    host), is broken by the next waiter (farm/leases.py)."""

    __tablename__ = "leases"

    key: Mapped[str] = mapped_column(SHA, primary_key=True)  # digest of what is being made
    holder: Mapped[str] = mapped_column(String(200))  # host.pid (farm/leftovers.py:owner_tag)
    purpose: Mapped[str] = mapped_column(String(300))
    acquired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class QualityMeasurement(Base):
    """What quantizing costs a model, measured teacher-forced on held-out text against its float
    reference (farm_toolchain/sensitivity.py): one treatment applied to every op group of a float
    export, each group scored alone (kind "treatment"), or one whole quantized model (kind
    "candidate", a recipe search's try). Content-keyed: the same float export, text, treatment,
    positions, measurement version and toolchain is measured once (`measure_key`)."""

    __tablename__ = "quality_measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    measure_key: Mapped[str] = mapped_column(SHA, unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # treatment | candidate
    float_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), index=True)
    # The quantized model a candidate measurement read (None for a treatment sweep, whose files are
    # scratch: its figures are per group).
    artifact_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"), index=True, nullable=True)
    treatment: Mapped[str | None] = mapped_column(String(200))  # name, e.g. int4_b32 (+ overrides)
    treatment_digest: Mapped[str | None] = mapped_column(SHA)
    text_sha256: Mapped[str] = mapped_column(SHA)  # the held-out evaluation text
    positions: Mapped[int] = mapped_column(Integer)
    window: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer)  # of the measurement: old rows are not reused
    toolchain_id: Mapped[str | None] = mapped_column(ForeignKey("toolchains.id"))
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    seconds: Mapped[float] = mapped_column(default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TuneSearch(Base):
    """One `farm tune` run: the target, every candidate it tried (recipe, quantized model, bundle,
    size, measured quality, gate verdicts), the frontier it measured, and what it chose."""

    __tablename__ = "tune_searches"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[str] = mapped_column(String(200), index=True)
    config_name: Mapped[str] = mapped_column(String(200))
    float_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))
    target: Mapped[dict[str, Any]] = mapped_column(JSON)  # max_kl, min_top1, max_bytes_per_param
    status: Mapped[str] = mapped_column(String(16))  # running | met | not_met | gates_failed
    recipe_name: Mapped[str | None] = mapped_column(String(200))
    recipe_digest: Mapped[str | None] = mapped_column(ForeignKey("recipes.digest"), nullable=True)
    bundle_sha256: Mapped[str | None] = mapped_column(ForeignKey("artifacts.sha256"), nullable=True)
    candidates: Mapped[list[Any]] = mapped_column(JSON, default=list)
    frontier: Mapped[list[Any]] = mapped_column(JSON, default=list)
    reason: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class LineageGeneration(Base):
    """One row whose `n` grows with every committed transaction that changes what lineage shows
    (farm/lineage/db.py bumps it; lease rows do not count): a reader that cached an answer at
    generation n may serve it while n has not moved (`farm api`)."""

    __tablename__ = "lineage_generation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger)


class StageFailure(Base):
    """A build that stopped in a stage for a reason other than bad input: which config, family and
    recipe, the stage, the tool that failed and its version, the toolchain, the tool's own one-line
    reason and the log that holds the rest (issue 18: what fails is named, with its evidence). A
    family matrix row reads the newest of these against the newest bundle."""

    __tablename__ = "stage_failures"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[str] = mapped_column(String(200), index=True)
    family: Mapped[str] = mapped_column(String(64), index=True)
    recipe_name: Mapped[str | None] = mapped_column(String(200))
    recipe_digest: Mapped[str | None] = mapped_column(SHA, nullable=True)
    source_id: Mapped[str | None] = mapped_column(SHA, nullable=True)
    stage: Mapped[str] = mapped_column(String(32))
    tool: Mapped[str] = mapped_column(String(64))
    tool_version: Mapped[str | None] = mapped_column(String(32))
    toolchain_id: Mapped[str | None] = mapped_column(ForeignKey("toolchains.id"))
    error: Mapped[str] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
