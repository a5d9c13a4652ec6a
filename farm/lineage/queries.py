"""Read-only lineage queries; each returns plain JSON-able dicts (the CLI prints them)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from farm.errors import AmbiguousPrefix, NotASha, UnknownArtifact
from farm.lineage.models import (
    Artifact,
    ArtifactInput,
    DeviceResult,
    GateResult,
    LineageGeneration,
    Recheck,
    Recipe,
    Section,
    Source,
    StageFailure,
    Toolchain,
)

_HEX = re.compile(r"^[0-9a-f]{4,64}$")
ARTIFACT_KINDS = ("tokenizer", "float_tflite", "quantized_tflite", "tflite_part", "image_parts", "litertlm", "card", "card_file",
                  "release_delta")
SHARED_SHOWN = 50  # files listed per shared section in a lineage record
EXPORTS_READ = 200  # newest float exports read for the export's recorded peak per parameter


def _prebuilt(make):
    """A statement built once, with bind parameters, and bound per call. Building a statement is
    Python work SQLAlchemy repeats on every call (coercing each clause, then its cache key): ~1.3 ms
    of a 3.4 ms lineage lookup made of 14 statements (cProfile, 100k artifacts), the most `farm api`
    spends per request under load. A built statement keeps its cache key."""
    return functools.cache(make)


@_prebuilt
def _q_prefix() -> Any:
    return (select(Artifact.sha256).where(Artifact.sha256 >= bindparam("lo"), Artifact.sha256 < bindparam("hi"))
            .order_by(Artifact.sha256).limit(11))


@_prebuilt
def _q_prefix_open() -> Any:
    return select(Artifact.sha256).where(Artifact.sha256 >= bindparam("lo")).order_by(Artifact.sha256).limit(11)


def resolve_sha(session: Session, text: str) -> str:
    """A full sha256 or a unique prefix of at least 4 hex digits -> the full sha256."""
    prefix = text.strip().lower()
    if not _HEX.match(prefix):
        raise NotASha(f"{text[:80]!r} is not a sha256 or a prefix of one (4 to 64 hex digits)")
    # A range on the primary key, not LIKE 'p%': SQLite's LIKE is case-insensitive and PostgreSQL's
    # collation is not C, so LIKE scanned the whole index on both (measured: linear in artifacts).
    upper = _next_prefix(prefix)
    rows = (session.scalars(_q_prefix(), {"lo": prefix, "hi": upper}) if upper is not None
            else session.scalars(_q_prefix_open(), {"lo": prefix})).all()
    if not rows:
        raise UnknownArtifact(f"no artifact with sha256 {prefix}…: list artifacts with `farm artifacts`")
    if len(rows) > 1:
        shown = ", ".join(r[:16] for r in rows[:10]) + (" …" if len(rows) > 10 else "")
        raise AmbiguousPrefix(f"sha256 prefix {prefix!r} is ambiguous: {shown}; give more digits", rows[:10])
    return rows[0]


def _next_prefix(prefix: str) -> str | None:
    """The smallest hex string of the same length greater than every string starting with `prefix`
    ("abf" -> "ac0"); None for "fff…" (no upper bound)."""
    n = int(prefix, 16) + 1
    if n >= 16 ** len(prefix):
        return None
    return f"{n:0{len(prefix)}x}"


def _artifact_brief(a: Artifact | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {"sha256": a.sha256, "kind": a.kind, "name": a.name, "size": a.size, "uri": a.uri}


def _parent(session: Session, sha: str, role: str) -> Artifact | None:
    return _parents(session, sha).get(role)


def _parents(session: Session, sha: str) -> dict[str, Artifact]:
    """{role: parent artifact} of one artifact, in one statement."""
    rows = session.execute(_q_parents(), {"sha": sha}).all()
    return {role: a for role, a in rows}


@_prebuilt
def _q_parents() -> Any:
    from sqlalchemy.orm import joinedload

    # The parent's recipe in the same statement (a lineage record reads the quantized model's).
    return (select(ArtifactInput.role, Artifact).join(Artifact, Artifact.sha256 == ArtifactInput.input_sha256)
            .where(ArtifactInput.artifact_sha256 == bindparam("sha")).options(joinedload(Artifact.recipe)))


def sections_of(session: Session, sha: str) -> list[dict[str, Any]]:
    rows = session.scalars(_q_sections_of(), {"sha": sha})
    return [_section_dict(s) for s in rows]


@_prebuilt
def _q_sections_of() -> Any:
    return select(Section).where(Section.artifact_sha256 == bindparam("sha")).order_by(Section.idx)


def _section_dict(s: Section) -> dict[str, Any]:
    return {"index": s.idx, "type": s.type, "offset": s.offset, "size": s.size, "sha256": s.sha256}


def section_carriers(session: Session, section_sha: str, limit: int = 100) -> dict[str, Any]:
    """The files carrying this section byte for byte, at most `limit` (by the (sha256, artifact)
    index), each with its name and kind, and whether there are more."""
    rows = session.execute(
        select(Section.artifact_sha256, Section.type, Artifact.name, Artifact.kind)
        .join(Artifact, Artifact.sha256 == Section.artifact_sha256)
        .where(Section.sha256 == section_sha).order_by(Section.artifact_sha256).limit(limit + 1)).all()
    files = [{"sha256": r[0], "section_type": r[1], "name": r[2], "kind": r[3]} for r in rows[:limit]]
    return {"section_sha256": section_sha, "files": files, "more": len(rows) > limit}


def latest_card(session: Session, model_id: str) -> dict[str, Any] | None:
    """The newest published card of a model (the head of its `card/<model id>` chain)."""
    a = session.scalars(select(Artifact).where(Artifact.chain == f"card/{model_id}")
                        .order_by(Artifact.chain_seq.desc()).limit(1)).first()
    if a is None:
        return None
    return {**_artifact_brief(a), "created_at": a.created_at.isoformat(), "details": a.details,
            "version": a.chain_seq}


def files_sharing_section(session: Session, section_sha: str, exclude: str | None = None) -> list[str]:
    """Every file that carries this section byte for byte."""
    q = select(Section.artifact_sha256).where(Section.sha256 == section_sha).distinct()
    return sorted(s for s in session.scalars(q) if s != exclude)


def section_diff(old: list[dict], new: list[dict]) -> list[dict[str, Any]]:
    """Section by section (matched by type and order of appearance): same bytes or changed."""

    def keyed(secs: list[dict]) -> dict[tuple[str, int], dict]:
        seen: dict[str, int] = {}
        out = {}
        for s in secs:
            n = seen.get(s["type"], 0)
            seen[s["type"]] = n + 1
            out[(s["type"], n)] = s
        return out

    a, b = keyed(old), keyed(new)
    diff = []
    for key in list(b) + [k for k in a if k not in b]:
        o, n = a.get(key), b.get(key)
        if o and n:
            status = "identical" if o["sha256"] == n["sha256"] else "changed"
        else:
            status = "added" if n else "removed"
        diff.append(
            {
                "type": key[0],
                "status": status,
                "old_sha256": o and o["sha256"],
                "new_sha256": n and n["sha256"],
                "old_size": o and o["size"],
                "new_size": n and n["size"],
            }
        )
    return diff


@functools.lru_cache(maxsize=64)
def _sharers_statement(n: int) -> Any:
    """The UNION ALL of `n` LIMIT-ed index ranges (section sha256 `:s0`.. `:s{n-1}`, files other than
    `:me`), built once per `n` and bound per lookup: building it anew was ~0.6 ms of a ~4 ms lookup
    (SQLAlchemy's column proxies for each subquery), the largest single cost when `farm api` is busy."""
    from sqlalchemy import bindparam, union_all

    parts = [select(Section.sha256, Section.artifact_sha256)
             .where(Section.sha256 == bindparam(f"s{i}"), Section.artifact_sha256 != bindparam("me"))
             .order_by(Section.artifact_sha256).limit(SHARED_SHOWN + 1).subquery()
             for i in range(n)]
    return union_all(*[select(p.c.sha256, p.c.artifact_sha256) for p in parts]) if n > 1 else \
        select(parts[0].c.sha256, parts[0].c.artifact_sha256)


def lookup(session: Session, text: str) -> dict[str, Any]:
    """`lineage` of a sha256 or unique prefix, with the recipe search that chose it ("tune_search",
    a bundle's; None if none did): the artifact, its source, toolchain and newest search found in
    the statement that resolves the prefix (`resolve_sha` + `lineage` + `tune_searches` read them
    in three: two round trips of the ~14 every `farm api` lookup made)."""
    prefix = text.strip().lower()
    upper = _next_prefix(prefix) if _HEX.match(prefix) else None
    rows = (session.execute(_q_find(upper is not None), {"lo": prefix, "hi": upper}).all()
            if _HEX.match(prefix) else [])
    if len(rows) != 1:
        resolve_sha(session, text)  # raises what is wrong: not a sha, unknown, or ambiguous (with the candidates)
    art, previous, search_id = rows[0]
    rec = _lineage(session, art, previous)
    if art.kind == "litertlm":
        from farm.lineage.models import TuneSearch

        rec["tune_search"] = _tune_dict(session.get(TuneSearch, search_id)) if search_id is not None else None
    return rec


@functools.lru_cache(maxsize=2)
def _q_find(bounded: bool) -> Any:
    from sqlalchemy.orm import aliased, joinedload

    from farm.lineage.models import TuneSearch

    search = (select(TuneSearch.id).where(TuneSearch.bundle_sha256 == Artifact.sha256)
              .order_by(TuneSearch.id.desc()).limit(1).scalar_subquery())
    previous = aliased(Artifact)  # the version it supersedes, if any (a model's chain)
    q = (select(Artifact, previous, search).outerjoin(previous, previous.sha256 == Artifact.supersedes_sha256)
         .where(Artifact.sha256 >= bindparam("lo")))
    if bounded:
        q = q.where(Artifact.sha256 < bindparam("hi"))
    return (q.options(joinedload(Artifact.source), joinedload(Artifact.toolchain))
            .order_by(Artifact.sha256).limit(2))


def lineage(session: Session, sha: str) -> dict[str, Any]:
    """The whole provenance of one artifact, walking its parents up to the source."""
    art = session.scalars(_q_artifact(), {"sha": sha}).first()
    if art is None:
        raise UnknownArtifact(f"no artifact with sha256 {sha}")
    return _lineage(session, art)


_UNREAD = object()


def _lineage(session: Session, art: Artifact, prev: Any = _UNREAD) -> dict[str, Any]:
    """The record of `art`; `prev`: the artifact it supersedes when the caller read it already."""
    sha = art.sha256

    # Walk up: bundle -(model)-> quantized -(float_model)-> float export, both levels in one statement.
    parents: dict[str, Artifact] = {}
    grandparents: dict[str, Artifact] = {}  # the "model" parent's own parents
    for role, parent, up_role, grand in session.execute(_q_two_levels(), {"sha": sha}):
        parents[role] = parent
        if up_role is not None:
            grandparents[up_role] = grand
    model = parents.get("model") if art.kind == "litertlm" else None
    quantized = model if model is not None and model.kind == "quantized_tflite" else (art if art.kind == "quantized_tflite" else None)
    if quantized is not None and quantized is not art:
        float_art = grandparents.get("float_model")
    elif quantized is art:
        float_art = parents.get("float_model")
    else:
        float_art = art if art.kind == "float_tflite" else None
    tokenizer = parents.get("tokenizer")
    recipe_holder = quantized or art

    src = art.source
    source = None
    if src is not None:
        source = {
            "id": src.id,
            "kind": src.kind,
            "name": src.name,
            "family": src.family,
            "repo_id": src.repo_id,
            "revision": src.revision,
            "path": src.path,
            "spec": src.spec,
            "files": src.files,
            "tokenizer_sha256": src.tokenizer_sha256,
            "generation": src.generation,
        }

    float_export = None
    if float_art is not None:
        d = float_art.details or {}
        float_export = {
            **_artifact_brief(float_art),
            "converter": d.get("converter"),
            "export_config": d.get("export_config"),
            "signatures": sorted((d.get("signatures") or {}).keys()),
            "toolchain_id": float_art.toolchain_id,
            # what the export needed: the too-large refusal's basis (farm/refusals/base.py)
            "peak_rss_bytes": d.get("peak_rss_bytes"),
            "memory_mode": d.get("memory_mode"),
        }
        if d.get("source_grid"):
            float_export["source_grid"] = d["source_grid"]

    recipe = None
    if recipe_holder is not None and recipe_holder.recipe is not None:
        r = recipe_holder.recipe
        q = (quantized.details if quantized else {}) or {}
        recipe = {
            "name": r.name,
            "digest": r.digest,
            "body": r.body,
            "exceptions": q.get("exceptions"),
            "rules": q.get("rules"),
            "calibration": q.get("calibration"),
            "bytes_per_param": q.get("bytes_per_param"),
            "quantized_model": _artifact_brief(quantized),
        }

    tc = art.toolchain
    toolchain = (
        {"id": tc.id, "python": tc.python_version, "packages": tc.packages} if tc is not None else None
    )

    # The sections, each with the artifact it is in its own right (e.g. the TFLite section == the
    # quantized model), in one statement. Which other files carry each section: at most
    # SHARED_SHOWN per section, by an index range (a section every bundle of an architecture
    # carries would otherwise list them all: linear in the farm's size); `shared_with_more` says
    # there are more.
    same: dict[str, Artifact] = {}
    sections = []
    prev_sections = []  # the superseded version's, for the diff: read in the same statement
    shas_read = [sha] + ([art.supersedes_sha256] if art.supersedes_sha256 else [])
    for sec, equal in session.execute(_q_sections(), {"shas": shas_read}):
        if sec.artifact_sha256 != sha:
            prev_sections.append(_section_dict(sec))
            continue
        sections.append(_section_dict(sec))
        if equal is not None:
            same[equal.sha256] = equal
    shas = [x["sha256"] for x in sections]
    # Every section's sharers in one statement: a UNION ALL of one LIMIT-ed index range per section
    # (a window function over all carriers would read every file of a section the whole farm shares:
    # measured 74 ms p50 on PostgreSQL at 100k; each LIMIT-ed range stops after SHARED_SHOWN + 1).
    sharers: dict[str, list[str]] = {}
    if shas:
        distinct = list(dict.fromkeys(shas))
        params = {"me": sha, **{f"s{i}": sec for i, sec in enumerate(distinct)}}
        for sec, other in session.execute(_sharers_statement(len(distinct)), params):
            sharers.setdefault(sec, []).append(other)
    for x in sections:
        others = sharers.get(x["sha256"], [])
        x["shared_with"] = sorted(set(others[:SHARED_SHOWN]))
        x["shared_with_more"] = len(others) > SHARED_SHOWN
        x["equals_artifact"] = _artifact_brief(same.get(x["sha256"]))

    previous = None
    if art.supersedes_sha256:
        if prev is _UNREAD:
            prev = session.get(Artifact, art.supersedes_sha256)
        previous = {
            **_artifact_brief(prev),
            "created_at": prev.created_at.isoformat(),
            "sections": section_diff(prev_sections, sections),
        }
    later = session.scalars(_q_later(), {"sha": sha}).all()

    gate_shas = [sha] + ([float_art.sha256] if float_art is not None and float_art.sha256 != sha else [])
    return {
        "sha256": art.sha256,
        "kind": art.kind,
        "name": art.name,
        "size": art.size,
        "uri": art.uri,
        "imported": art.imported,
        "created_at": art.created_at.isoformat(),
        "details": art.details,
        "source": source,
        "float_export": float_export,
        "recipe": recipe,
        "tokenizer": _artifact_brief(tokenizer) or (
            {"sha256": src.tokenizer_sha256} if src is not None and src.tokenizer_sha256 else None
        ),
        "toolchain": toolchain,
        "sections": sections,
        "previous": previous,
        "superseded_by": list(later),
        "chain": {"chain": art.chain, "seq": art.chain_seq} if art.chain else None,
        "locations": locations(session, sha),
        "gates": gate_results(session, gate_shas),
        "rechecks": rechecks_for(session, sha),
        "siblings": siblings(session, sha, limit=SHARED_SHOWN),
        "devices": device_results(session, sha),
    }


@_prebuilt
def _q_two_levels() -> Any:
    """An artifact's parents (each with its recipe), and the parents of its "model" parent."""
    from sqlalchemy.orm import aliased, joinedload

    up, grand = aliased(ArtifactInput), aliased(Artifact)
    return (select(ArtifactInput.role, Artifact, up.role, grand)
            .join(Artifact, Artifact.sha256 == ArtifactInput.input_sha256)
            .outerjoin(up, (up.artifact_sha256 == Artifact.sha256) & (ArtifactInput.role == "model"))
            .outerjoin(grand, grand.sha256 == up.input_sha256)
            .where(ArtifactInput.artifact_sha256 == bindparam("sha"))
            .options(joinedload(Artifact.recipe)))


@_prebuilt
def _q_artifact() -> Any:
    from sqlalchemy.orm import joinedload

    # Source and toolchain in the same statement (each lazy load was a round trip).
    return (select(Artifact).where(Artifact.sha256 == bindparam("sha"))
            .options(joinedload(Artifact.source), joinedload(Artifact.toolchain)))


@_prebuilt
def _q_sections() -> Any:
    return (select(Section, Artifact).outerjoin(Artifact, Artifact.sha256 == Section.sha256)
            .where(Section.artifact_sha256.in_(bindparam("shas", expanding=True)))
            .order_by(Section.artifact_sha256, Section.idx))


@_prebuilt
def _q_later() -> Any:
    return select(Artifact.sha256).where(Artifact.supersedes_sha256 == bindparam("sha"))


def locations(session: Session, sha: str) -> list[dict[str, Any]]:
    """Every store the bytes were put in, oldest first."""
    rows = session.scalars(_q_locations(), {"sha": sha})
    return [{"store_url": r.store_url, "uri": r.uri, "recorded_at": r.recorded_at.isoformat()} for r in rows]


@_prebuilt
def _q_locations() -> Any:
    from farm.lineage.models import ArtifactLocation

    return (select(ArtifactLocation).where(ArtifactLocation.artifact_sha256 == bindparam("sha"))
            .order_by(ArtifactLocation.recorded_at))


def result_dict(r: GateResult) -> dict[str, Any]:
    return {
        "id": r.id,
        "artifact_sha256": r.artifact_sha256,
        "gate": r.gate,
        "gate_version": r.gate_version,
        "kind": r.kind,
        "status": r.status,
        "runtime": r.runtime,
        "runtime_version": r.runtime_version,
        "backend": r.backend,
        "device": r.device,
        "host": r.host,
        "cpu_class": r.cpu_class,
        "cpu": r.cpu,
        "replies": r.replies,
        "metrics": r.metrics,
        "evidence": r.evidence,
        "findings": r.findings,
        "flow_run_id": r.flow_run_id,
        "recheck_id": r.recheck_id,
        "config": r.config,
        "inputs": r.inputs,
        "request_digest": r.request_digest,
        "toolchain_id": r.toolchain_id,
        "started_at": r.started_at.isoformat(),
        "finished_at": r.finished_at.isoformat(),
    }


def gate_results(session: Session, shas: list[str]) -> list[dict[str, Any]]:
    """Every gate result on these artifacts, oldest first (each is a measurement of those bytes)."""
    rows = session.scalars(_q_gate_results(), {"shas": list(shas)})
    return [result_dict(r) for r in rows]


@_prebuilt
def _q_gate_results() -> Any:
    return (select(GateResult).where(GateResult.artifact_sha256.in_(bindparam("shas", expanding=True)))
            .order_by(GateResult.id))


def siblings(session: Session, sha: str, limit: int | None = None) -> list[str]:
    """The other bundles made with the same recipe (digest): other models, sizes, variants (the
    oldest `limit` in a lineage record: a recipe every bundle uses would list the whole farm)."""
    art = session.get(Artifact, sha)
    if art is None or art.recipe_digest is None:
        return []
    return recipe_siblings(session, art.recipe_digest, exclude=sha, limit=limit)


def recipe_siblings(session: Session, recipe_digest: str, exclude: str | None = None,
                    limit: int | None = None) -> list[str]:
    q = _q_siblings(limit)
    return list(session.scalars(q, {"digest": recipe_digest, "me": exclude or ""}))


@functools.lru_cache(maxsize=8)
def _q_siblings(limit: int | None) -> Any:
    q = select(Artifact.sha256).where(
        Artifact.recipe_digest == bindparam("digest"), Artifact.kind == "litertlm", Artifact.sha256 != bindparam("me")
    ).order_by(Artifact.created_at)
    return q.limit(limit) if limit else q


def export_siblings(session: Session, export_digest: str, exclude: str | None = None) -> list[str]:
    """Bundles whose float export was made with the same export configuration (family, converter
    options, converter version): the files a converter-side defect (a fused-op graph) would share."""
    floats = select(Artifact.sha256).where(
        Artifact.kind == "float_tflite", Artifact.details["export_digest"].as_string() == export_digest)
    quantized = select(ArtifactInput.artifact_sha256).where(
        ArtifactInput.role == "float_model", ArtifactInput.input_sha256.in_(floats))
    q = (select(Artifact.sha256)
         .join(ArtifactInput, (ArtifactInput.artifact_sha256 == Artifact.sha256) & (ArtifactInput.role == "model"))
         .where(ArtifactInput.input_sha256.in_(quantized), Artifact.kind == "litertlm",
                Artifact.sha256 != (exclude or ""))
         .order_by(Artifact.created_at))
    return list(session.scalars(q))


def bundles_from_float(session: Session, float_sha: str) -> list[str]:
    """Every bundle made (through a quantized model) from this float export."""
    quantized = select(ArtifactInput.artifact_sha256).where(
        ArtifactInput.role == "float_model", ArtifactInput.input_sha256 == float_sha)
    q = select(ArtifactInput.artifact_sha256).where(
        ArtifactInput.role == "model", ArtifactInput.input_sha256.in_(quantized)).order_by(ArtifactInput.artifact_sha256)
    return list(session.scalars(q))


def gate_facts(session: Session, sha: str) -> dict[str, Any] | None:
    """What the gate suite needs to know of a bundle, in one read: its details, source record,
    tokenizer, float export (and that export's configuration digest), recipe. None if `sha` is not a
    recorded bundle."""
    art = session.get(Artifact, sha)
    if art is None or art.kind != "litertlm":
        return None
    tok = session.get(ArtifactInput, (sha, "tokenizer"))
    model = session.get(ArtifactInput, (sha, "model"))
    float_edge = session.get(ArtifactInput, (model.input_sha256, "float_model")) if model else None
    float_art = session.get(Artifact, float_edge.input_sha256) if float_edge else None
    src = art.source
    return {
        "sha256": sha,
        "size": art.size,
        "details": art.details or {},
        "recipe_digest": art.recipe_digest,
        "tokenizer_sha256": tok.input_sha256 if tok else None,
        "float_sha256": float_art.sha256 if float_art else None,
        "export_digest": (float_art.details or {}).get("export_digest") if float_art else None,
        "source": None if src is None else {
            "id": src.id, "kind": src.kind, "name": src.name, "family": src.family, "path": src.path,
            "files": src.files, "generation": src.generation, "tokenizer_sha256": src.tokenizer_sha256,
        },
    }


def prior_gate_result(session: Session, *, artifact_sha256: str, gate: str, gate_version: int, toolchain_id: str,
                      runtime_version: str, request_digest: str, cpu_class: str) -> dict[str, Any] | None:
    """The newest result already recorded for exactly this measurement: the same bytes, gate and
    version, toolchain and runtime, request (inputs and thresholds) and CPU class (the kernels the
    runtime ran: a result of one class is never another's). A changed input is a new measurement; a
    could_not_run is never reused."""
    row = session.scalars(
        select(GateResult)
        .where(GateResult.artifact_sha256 == artifact_sha256, GateResult.gate == gate,
               GateResult.request_digest == request_digest, GateResult.cpu_class == cpu_class,
               GateResult.gate_version == gate_version,
               GateResult.toolchain_id == toolchain_id, GateResult.runtime_version == runtime_version,
               GateResult.status != "could_not_run")
        .order_by(GateResult.id.desc()).limit(1)
    ).first()
    return result_dict(row) if row is not None else None


def latest_gate_status(session: Session, artifact_sha256: str, gate: str) -> str | None:
    row = session.scalars(select(GateResult.status).where(
        GateResult.artifact_sha256 == artifact_sha256, GateResult.gate == gate).order_by(GateResult.id.desc()).limit(1)).first()
    return row


def recheck_basis(session: Session, trigger: dict[str, Any]) -> dict[str, Any]:
    """Which files a failure's re-check covers, following its cause:
    - the float export failed (logits_parity_float): every bundle whose float export was made with
      the same export configuration (family, converter options, converter version);
    - a bundle failed and its float export passed logits_parity_float: the recipe's other bundles
      (the same recipe digest) — quantization is what changed the bytes;
    - a bundle failed and its float export did not pass (failed, or skipped because a fused custom op
      cannot run in the plain interpreter): the export configuration's other bundles;
    - nothing recorded to follow (an imported bundle without recipe): none.
    {"basis": recipe | export_config | none, "key", "recipe_digest", "siblings"}"""
    art = session.get(Artifact, trigger["artifact_sha256"])
    if art is not None and art.kind == "float_tflite":
        key = (art.details or {}).get("export_digest")
        sibs = export_siblings(session, key) if key else []
        return {"basis": "export_config" if key else "none", "key": key, "recipe_digest": None, "siblings": sibs}
    facts = gate_facts(session, trigger["artifact_sha256"]) or {}
    float_sha, recipe = facts.get("float_sha256"), facts.get("recipe_digest")
    float_ok = float_sha is not None and latest_gate_status(session, float_sha, "logits_parity_float") == "pass"
    if float_sha is not None and not float_ok and facts.get("export_digest"):
        key = facts["export_digest"]
        return {"basis": "export_config", "key": key, "recipe_digest": recipe,
                "siblings": export_siblings(session, key, exclude=art.sha256)}
    if recipe is not None:
        return {"basis": "recipe", "key": recipe, "recipe_digest": recipe,
                "siblings": recipe_siblings(session, recipe, exclude=art.sha256)}
    return {"basis": "none", "key": None, "recipe_digest": None, "siblings": []}


def gate_result(session: Session, result_id: int) -> dict[str, Any] | None:
    row = session.get(GateResult, result_id)
    return result_dict(row) if row is not None else None


def rechecks_for(session: Session, sha: str) -> list[dict[str, Any]]:
    """Re-checks this artifact took part in: triggered by a failure on it, or run on it because a
    sibling failed."""
    rows = session.scalars(_q_rechecks(), {"sha": sha}).all()
    out = []
    for rc in rows:
        trigger = session.get(GateResult, rc.trigger_result_id)
        results = session.scalars(select(GateResult).where(GateResult.recheck_id == rc.id).order_by(GateResult.id))
        out.append({
            "id": rc.id,
            "kind": rc.kind,
            "recipe_digest": rc.recipe_digest,
            "basis": rc.basis,
            "basis_key": rc.basis_key,
            "flow_run_ids": rc.flow_run_ids or [],
            "created_at": rc.created_at.isoformat(),
            "flow_run_id": rc.flow_run_id,
            "trigger": {"artifact_sha256": trigger.artifact_sha256, "gate": trigger.gate, "status": trigger.status,
                        "result_id": trigger.id} if trigger else None,
            "siblings": rc.siblings,
            "results": [{"artifact_sha256": r.artifact_sha256, "gate": r.gate, "status": r.status, "result_id": r.id}
                        for r in results],
        })
    return out


@_prebuilt
def _q_rechecks() -> Any:
    trig_ids = select(GateResult.id).where(GateResult.artifact_sha256 == bindparam("sha"))
    as_sibling = select(GateResult.recheck_id).where(GateResult.artifact_sha256 == bindparam("sha"),
                                                     GateResult.recheck_id.is_not(None))
    return select(Recheck).where(Recheck.trigger_result_id.in_(trig_ids) | Recheck.id.in_(as_sibling)).order_by(Recheck.id)


def named_objects(session: Session) -> dict[str, list[str]]:
    """Every store object lineage names: each artifact, and each file of each recorded source
    (sha256 -> what names it)."""
    from farm.lineage.models import Source

    named: dict[str, list[str]] = {}
    for sha, kind, name in session.execute(select(Artifact.sha256, Artifact.kind, Artifact.name)):
        named.setdefault(sha, []).append(f"{kind} {name or ''}".strip())
    for sid, sname, files in session.execute(select(Source.id, Source.name, Source.files)):
        for f in files or []:
            named.setdefault(f["sha256"], []).append(f"source file {f['path']} of {sname} ({sid[:12]})")
    return named


def source_file_copies(session: Session) -> dict[str, list[Path]]:
    """sha256 -> the recorded folder copies of that source file (where a repair may take it from)."""
    from farm.lineage.models import Source

    out: dict[str, list[Path]] = {}
    for path, files in session.execute(select(Source.path, Source.files)):
        for f in files or []:
            if path:
                out.setdefault(f["sha256"], []).append(Path(path) / f["path"])
    return out


def list_artifacts(session: Session, kind: str | None = None, limit: int = 50, model: str | None = None,
                   recipe: str | None = None) -> list[dict[str, Any]]:
    """Newest first. `model`: a model id (its bundles' and cards' version chains); `recipe`: a
    recipe name or digest."""
    q = select(Artifact).order_by(Artifact.created_at.desc()).limit(limit)
    if kind:
        q = q.where(Artifact.kind == kind)
    if model:
        q = q.where(Artifact.model_id == model.lower())
    if recipe:
        digests = select(Recipe.digest).where((Recipe.name == recipe) | (Recipe.digest == recipe))
        q = q.where(Artifact.recipe_digest.in_(digests))
    return [
        {**_artifact_brief(a), "created_at": a.created_at.isoformat(), "imported": a.imported}
        for a in session.scalars(q)
    ]


DEVICE_FIELDS = (
    "id", "artifact_sha256", "device_id", "accelerator", "status", "failure_class", "prefill_tokens",
    "decode_tokens", "runs", "cache_mode", "prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms", "init_ms",
    "peak_mem_mb", "delegated_ops", "total_ops", "full_delegation", "context_length", "runtime",
    "runtime_version", "env", "host", "cpu_class", "cpu", "evidence", "protocol", "flow_run_id",
)


def device_result_dict(r: DeviceResult) -> dict[str, Any]:
    return {**{f: getattr(r, f) for f in DEVICE_FIELDS}, "started_at": r.started_at.isoformat(),
            "finished_at": r.finished_at.isoformat()}


def device_results(session: Session, sha: str) -> list[dict[str, Any]]:
    rows = session.scalars(_q_device_results(), {"sha": sha})
    return [device_result_dict(r) for r in rows]


@_prebuilt
def _q_device_results() -> Any:
    return select(DeviceResult).where(DeviceResult.artifact_sha256 == bindparam("sha")).order_by(DeviceResult.id)


def _chain_heads(session: Session, *where: Any) -> list[str]:
    """The head (highest chain_seq) of each bundle version chain matching `where`, by chain name."""
    rows = session.execute(select(Artifact.chain, Artifact.chain_seq, Artifact.sha256)
                           .where(Artifact.kind == "litertlm", Artifact.chain.is_not(None), *where)).all()
    heads: dict[str, tuple[int, str]] = {}
    for chain, seq, sha in rows:
        if chain not in heads or seq > heads[chain][0]:
            heads[chain] = (seq, sha)
    return [heads[c][1] for c in sorted(heads)]


def current_bundles(session: Session, model_id: str) -> list[str]:
    """The current file of each variant of a model: the head of each version chain
    `<model id>/<variant>` (farm-built bundles only: imports join no chain), by variant name."""
    return _chain_heads(session, Artifact.model_id == model_id)


def text_twin(session: Session, sha: str) -> dict[str, Any] | None:
    """For an image bundle: the current text bundle (no image contract) made from the same source
    with the same recipe, the file its card compares sections with; None if there is none."""
    art = session.get(Artifact, sha)
    if art is None or art.source_id is None:
        return None
    for head in reversed(_chain_heads(session, Artifact.source_id == art.source_id,
                                      Artifact.recipe_digest == art.recipe_digest)):
        other = session.get(Artifact, head)
        if head != sha and not (other.details or {}).get("image"):
            return {**_artifact_brief(other), "sections": sections_of(session, head)}
    return None


def published_bundles(session: Session) -> list[str]:
    """The current file of every variant of every model (the head of each bundle chain): what a
    re-validation re-measures."""
    return _chain_heads(session)


def recorded_runtime_versions(session: Session) -> list[str]:
    """Every runtime release a gate result was measured with."""
    # select().distinct(): a column-level distinct() outside an aggregate made SQLAlchemy warn on the terminal.
    return sorted(v for v in session.scalars(select(GateResult.runtime_version).distinct()) if v)


def runtime_facts(session: Session, shas: list[str]) -> dict[str, dict[str, Any]]:
    """{sha: {"name", "model_id", "gates", "devices"}}: what a release delta compares."""
    out = {}
    for sha in shas:
        a = session.get(Artifact, sha)
        out[sha] = {"name": a.name if a else None, "model_id": a.model_id if a else None,
                    "gates": gate_results(session, [sha]), "devices": device_results(session, sha)}
    return out


def chain_of(session: Session, sha: str) -> dict[str, Any] | None:
    """{"chain", "seq"} of a file, or None (an import, a stage output)."""
    a = session.get(Artifact, sha)
    return {"chain": a.chain, "seq": a.chain_seq} if a is not None and a.chain else None


def previous_files(session: Session, sha: str, limit: int = 20) -> list[str]:
    """The files this one superseded, newest first (the "previous file" chain)."""
    out, cur = [], session.get(Artifact, sha)
    while cur is not None and cur.supersedes_sha256 and len(out) < limit:
        out.append(cur.supersedes_sha256)
        cur = session.get(Artifact, cur.supersedes_sha256)
    return out


def reusable_device_result(session: Session, sha: str, device_id: str, accelerator: str, protocol: dict[str, Any],
                           runtime_version: str | None, cpu_class: str | None = None) -> dict[str, Any] | None:
    """The newest result of these bytes on this device and accelerator, under this protocol (and
    this runtime release, when the caller knows which will run; and this CPU class, for a device
    that is one), that a build may reuse instead of measuring again: a verified run, or a recorded
    decision that the file does not fit. A failed run is never reused (the next build tries again)."""
    q = (select(DeviceResult).where(DeviceResult.artifact_sha256 == sha, DeviceResult.device_id == device_id,
                                    DeviceResult.accelerator == accelerator,
                                    DeviceResult.status.in_(("verified", "does_not_fit")))
         .order_by(DeviceResult.id.desc()))
    if cpu_class is not None:
        q = q.where(DeviceResult.cpu_class == cpu_class)
    for row in session.scalars(q):
        if row.protocol != protocol:
            continue
        if runtime_version is not None and row.status == "verified" and row.runtime_version != runtime_version:
            continue
        return device_result_dict(row)
    return None


def lineage_generation(session: Session) -> int:
    """The lineage generation (farm/lineage/db.py): it moves when, and only when, a transaction that
    changed something lineage shows has committed."""
    return session.scalar(_q_generation()) or 0


@_prebuilt
def _q_generation() -> Any:
    return select(LineageGeneration.n).where(LineageGeneration.id == 1)


def device_results_of_run(session: Session, flow_run_id: str) -> list[dict[str, Any]]:
    """The device results a (bench-one) flow run recorded."""
    rows = session.scalars(select(DeviceResult).where(DeviceResult.flow_run_id == flow_run_id).order_by(DeviceResult.id))
    return [device_result_dict(r) for r in rows]


def largest_peak_mb(session: Session, sha: str) -> float | None:
    """The largest peak memory measured for this file on any device."""
    from sqlalchemy import func

    return session.scalar(select(func.max(DeviceResult.peak_mem_mb)).where(DeviceResult.artifact_sha256 == sha))


def largest_export_peaks(session: Session, mode: str) -> dict[str, tuple[int, int, str]]:
    """Per regime ("small": a float export under 2 GiB, "large": 2 GiB or more, which the converter
    writes another way), (peak resident bytes, source parameters, sha256) of the recorded float
    export of the largest model (10M+ parameters: a small model's peak is mostly the toolchain's
    fixed cost) made with the memory mode `mode` (its details' "memory_mode": exports recorded
    before the mode was, or made another way, predict nothing about this one). Every build asks, so
    only the newest EXPORTS_READ exports are read (three columns, no ORM objects): the figure
    follows the toolchain a farm runs now, and the cost does not grow with the farm."""
    best: dict[str, tuple[int, int, str]] = {}
    rows = session.execute(select(Artifact.sha256, Artifact.size, Artifact.details)
                           .where(Artifact.kind == "float_tflite")
                           .order_by(Artifact.created_at.desc()).limit(EXPORTS_READ))
    for sha, size, d in rows:
        d = d or {}
        peak, params = d.get("peak_rss_bytes"), d.get("source_params")
        if d.get("memory_mode") != mode or not peak or not params or params < 10_000_000:
            continue
        regime = "large" if (size or 0) >= 2**31 else "small"
        if regime not in best or params > best[regime][1]:
            best[regime] = (peak, params, sha)
    return best


def source_tokenizer(session: Session, sha: str) -> str | None:
    """The sha256 of the tokenizer.json recorded with the source of this artifact."""
    from farm.lineage.models import Source

    return session.scalars(select(Source.tokenizer_sha256).join(Artifact, Artifact.source_id == Source.id)
                           .where(Artifact.sha256 == sha)).first()


def artifact_details(session: Session, sha: str) -> dict[str, Any]:
    """One artifact's recorded details ({} for an unknown sha or none recorded)."""
    a = session.get(Artifact, sha)
    return dict(a.details or {}) if a is not None else {}


def artifact_brief(session: Session, sha: str) -> dict[str, Any] | None:
    """{sha256, kind, name, size, uri, source_id, details} of one artifact, or None."""
    a = session.get(Artifact, sha)
    if a is None:
        return None
    return {**_artifact_brief(a), "source_id": a.source_id, "details": a.details or {}}


def last_device_runs(session: Session) -> dict[str, dict[str, Any]]:
    """Each device's most recent run (any file), for `farm devices`."""
    out: dict[str, dict[str, Any]] = {}
    for r in session.scalars(select(DeviceResult).order_by(DeviceResult.id)):
        out[r.device_id] = device_result_dict(r)
    return out


def quality_measurement(session: Session, measure_key: str) -> dict[str, Any] | None:
    """A recorded sensitivity sweep or candidate measurement by its key (None: not measured)."""
    from farm.lineage.models import QualityMeasurement

    row = session.scalars(select(QualityMeasurement).where(QualityMeasurement.measure_key == measure_key)).first()
    if row is None:
        return None
    return {"id": row.id, "kind": row.kind, "float_sha256": row.float_sha256, "artifact_sha256": row.artifact_sha256,
            "treatment": row.treatment, "text_sha256": row.text_sha256, "positions": row.positions,
            "window": row.window, "version": row.version, "toolchain_id": row.toolchain_id, "result": row.result,
            "seconds": row.seconds, "created_at": row.created_at.isoformat() if row.created_at else None}


def _tune_dict(row: Any) -> dict[str, Any]:
    return {"id": row.id, "model_id": row.model_id, "config_name": row.config_name, "float_sha256": row.float_sha256,
            "target": row.target, "status": row.status, "recipe_name": row.recipe_name,
            "recipe_digest": row.recipe_digest, "bundle_sha256": row.bundle_sha256, "candidates": row.candidates,
            "frontier": row.frontier, "reason": row.reason,
            "started_at": row.started_at.isoformat() if row.started_at else None,
            "finished_at": row.finished_at.isoformat() if row.finished_at else None}


def tune_searches(session: Session, model_id: str | None = None, bundle_sha256: str | None = None,
                  limit: int = 20) -> list[dict[str, Any]]:
    """Recipe searches, newest first: of a model, or the ones that chose a bundle."""
    q = _q_tune_searches(model_id is not None, bundle_sha256 is not None, limit)
    return [_tune_dict(r) for r in session.scalars(q, {"model": model_id, "bundle": bundle_sha256})]


@functools.lru_cache(maxsize=16)
def _q_tune_searches(by_model: bool, by_bundle: bool, limit: int) -> Any:
    from farm.lineage.models import TuneSearch

    q = select(TuneSearch).order_by(TuneSearch.id.desc()).limit(limit)
    if by_model:
        q = q.where(TuneSearch.model_id == bindparam("model"))
    if by_bundle:
        q = q.where(TuneSearch.bundle_sha256 == bindparam("bundle"))
    return q


def family_matrix(session: Session) -> list[dict[str, Any]]:
    """Per (family, model, recipe), the newest outcome of building it: its newest bundle (the
    newest result of each gate on it, each device's newest result, the litert-torch and litert-lm
    that made and measured it) or, where a build failed in a stage after it, that failure (stage,
    tool, version, the tool's reason, the log). Oldest family first, then model, then recipe."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    bundles = session.execute(
        select(Source.family, Artifact.model_id, Recipe.name, Artifact.sha256, Artifact.size, Artifact.created_at,
               Toolchain.packages)
        .join(Source, Artifact.source_id == Source.id).join(Recipe, Artifact.recipe_digest == Recipe.digest)
        .join(Toolchain, Artifact.toolchain_id == Toolchain.id, isouter=True)
        .where(Artifact.kind == "litertlm", Artifact.model_id.is_not(None)).order_by(Artifact.created_at))
    for family, model, recipe, sha, size, at, packages in bundles:
        rows[(family, model, recipe)] = {
            "family": family, "model": model, "recipe": recipe, "outcome": "bundle", "sha256": sha, "size": size,
            "at": at.isoformat(), "litert_torch": (packages or {}).get("litert-torch")}
    failures = session.execute(select(StageFailure, Toolchain.packages)
                               .join(Toolchain, StageFailure.toolchain_id == Toolchain.id, isouter=True)
                               .order_by(StageFailure.id))
    for f, packages in failures:
        key = (f.family, f.model_id, f.recipe_name or "")
        if key in rows and rows[key]["at"] > f.created_at.isoformat():
            continue
        rows[key] = {"family": f.family, "model": f.model_id, "recipe": f.recipe_name, "outcome": "failed",
                     "stage": f.stage, "tool": f.tool, "tool_version": f.tool_version, "error": f.error,
                     "log": f.log_path, "at": f.created_at.isoformat(),
                     "litert_torch": (packages or {}).get("litert-torch")}
    shas = [r["sha256"] for r in rows.values() if r["outcome"] == "bundle"]
    gates: dict[str, dict[str, dict[str, Any]]] = {}
    for g in session.scalars(select(GateResult).where(GateResult.artifact_sha256.in_(shas)).order_by(GateResult.id)):
        gates.setdefault(g.artifact_sha256, {})[g.gate] = {
            "status": g.status, "runtime_version": g.runtime_version,
            "finding": (g.findings or [None])[0] if g.status in ("fail", "could_not_run", "warn") else None}
    devices: dict[str, dict[str, dict[str, Any]]] = {}
    for d in session.scalars(select(DeviceResult).where(DeviceResult.artifact_sha256.in_(shas))
                             .order_by(DeviceResult.id)):
        devices.setdefault(d.artifact_sha256, {})[f"{d.device_id}/{d.accelerator}"] = {
            "status": d.status, "runtime_version": d.runtime_version, "failure_class": d.failure_class}
    out = []
    for key in sorted(rows):
        row = rows[key]
        if row["outcome"] == "bundle":
            row["gates"] = gates.get(row["sha256"], {})
            row["devices"] = devices.get(row["sha256"], {})
            versions = {g["runtime_version"] for g in row["gates"].values() if g["runtime_version"]}
            row["litert_lm"] = ", ".join(sorted(versions)) or None
        out.append(row)
    return out
