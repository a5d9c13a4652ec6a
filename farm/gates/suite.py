"""Run gates on one bundle and record every result (a failure is data, not an error).

`SuiteContext.open` resolves what the suite needs once per suite run (one lineage read; local,
verified paths materialized lazily, at most once each: the bundle is hashed once per suite however many
gates read it). `run_gate` builds one gate's request from its registered spec, and re-uses a result
already recorded for exactly the same measurement — the same bytes, gate and version, runtime and its
version, toolchain, and the digest of the full request (thresholds, prompts, questions, lengths, and the
identity of every input file): a changed input or threshold measures again.

**Per CPU class** (issue 34): the same bytes answer differently on another CPU class (XNNPACK picks
its kernels from CPUID / hwcaps), so every result names the class its runtime ran on — the host, the
class key its runtime process reported, the device of the class (farm/devices/classes.py) — and the
class is part of the reuse key. The suite runs every gate on this host's class and the gates whose
answers depend on the kernels (`per_class`) on every other enabled class; the PyTorch reference
always runs here, on the host.

The gate measures the exact bytes lineage names: the bundle and float export from the store, the
source's tokenizer.json as stored at build time, and the PyTorch reference rebuilt from the store
file by file (farm/source_folder.py:materialize_source), each checked against the sha256 lineage
recorded for the source.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from farm.gates.config import GateConfig
from farm.devices.classes import ClassTarget, ClassTargets, class_targets, host_target
from farm.digest import digest
from farm_common.wire import FAILING
from farm.errors import BadInput, FarmError
from farm.families import Family, get_family
from farm_common.gates.registry import GATES, GateSpec
from farm.leases import lease
from farm.leftovers import owner_tag
from farm.lineage.queries.gates import gate_facts, prior_gate_result
from farm.lineage.record import record_gate_result
from farm.results import GateRecord
from farm.resources import Resources
from farm.progress import Progress, stderr_progress
from farm.source_folder import generation_settings, materialize_source

#: Statuses that fail a suite (and a build): a gate that could not run is not a pass.


@dataclass
class SuiteContext:
    res: Resources
    bundle_sha: str
    facts: dict[str, Any]
    config: GateConfig
    family: Family | None
    _paths: dict[str, str] = field(default_factory=dict)
    _scratch: Path | None = None
    _stop_ids: list[int] | None = None
    _classes: ClassTargets | None = None
    _host: ClassTarget | None = None

    @classmethod
    def open(cls, res: Resources, sha: str, config: GateConfig | None = None) -> "SuiteContext":
        with res.db.session() as s:
            facts = gate_facts(s, sha)
        if facts is None:
            raise BadInput(f"{sha[:16]} is not a recorded .litertlm bundle: gates run on bundles")
        recorded = facts["details"].get("gates_config")
        try:
            cfg = config or (GateConfig.model_validate(recorded) if recorded else GateConfig())
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise BadInput(f"the gate settings recorded with {sha[:16]} are not valid any more ({msg}): "
                           "pass the build config with --config") from None
        src = facts["source"]
        return cls(res=res, bundle_sha=sha, facts=facts, config=cfg,
                   family=get_family(src["family"]) if src else None)

    # --- facts --------------------------------------------------------------------------------

    @property
    def float_sha(self) -> str | None:
        return self.facts["float_sha256"]

    @property
    def tokenizer_sha(self) -> str | None:
        return self.facts["tokenizer_sha256"]

    @property
    def source(self) -> dict[str, Any] | None:
        return self.facts["source"]

    @property
    def text_twin_sha(self) -> str | None:
        """The current text bundle of this image bundle's source and recipe (lineage), if any."""
        if not self.image:
            return None
        from farm.lineage.queries.cards import text_twin

        with self.res.db.session() as s:
            twin = text_twin(s, self.bundle_sha)
        return twin["sha256"] if twin else None

    # --- where the runtime runs ---------------------------------------------------------------

    @property
    def classes(self) -> ClassTargets:
        """The CPU classes this suite gates on (the host's first), found once per suite."""
        if self._classes is None:
            self._classes = class_targets(self.res)
        return self._classes

    def use_classes(self, classes: ClassTargets) -> None:
        self._classes = classes

    def target(self, device: str | None = None) -> ClassTarget:
        """The class a gate runs on: a class device by id, else this host's own (found without
        presenting the others: a suite of this host's gates makes no arm64 root)."""
        if device is not None:
            return self.classes.by_device(device)
        if self._classes is not None:
            return self._classes.host
        if self._host is None:
            self._host = host_target(self.res)
        return self._host

    def known_failure(self, gate: str) -> Any:
        """The family's KnownFailure of this gate under the installed tools, or None."""
        if self.family is None:
            return None
        installed = self.res.toolchain.identity["packages"]
        return next((k for k in self.family.known_failures if k.where == gate and k.applies(installed)), None)

    @property
    def image(self) -> dict[str, Any] | None:
        """The image contract an image-text bundle was packaged with (None: a text bundle)."""
        return self.facts["details"].get("image")

    @property
    def prefill_lengths(self) -> list[int]:
        return list((self.facts["details"].get("metadata") or {}).get("prefill_lengths") or [])

    @property
    def prefill_length(self) -> int:
        return min(self.prefill_lengths) if self.prefill_lengths else 8

    @property
    def reference_stop_ids(self) -> list[int] | None:
        """The source's own end-of-sequence ids, as the source stage recorded them (read from the
        rebuilt reference folder for a source recorded before they were)."""
        if self._stop_ids is None and self.source is not None:
            gen = self.source.get("generation") or generation_settings(Path(self.local("reference")))
            self._stop_ids = list(gen["eos_token_ids"])
        return self._stop_ids

    @property
    def runtime_version(self) -> str:
        return str(self.res.toolchain.identity["packages"].get("litert-lm-api", "unknown"))

    # --- inputs by role -----------------------------------------------------------------------

    def identity(self, role: str) -> str | None:
        """What a role's bytes are, for the reuse key: a sha256, or the source's content id."""
        if role == "float_vision_encoder":
            return self.float_part("vision_encoder")
        if role == "text_twin":
            return self.text_twin_sha
        return {"bundle": self.bundle_sha, "float_export": self.float_sha, "tokenizer": self.tokenizer_sha,
                "reference": self.source["id"] if self.source else None}[role]

    def float_part(self, role: str) -> str | None:
        """The sha256 of one of the float export's image parts (convert stage: details.parts)."""
        if self.float_sha is None:
            return None
        from farm.lineage.queries.artifacts import artifact_details

        with self.res.db.session() as s:
            return (artifact_details(s, self.float_sha).get("parts") or {}).get(role)

    def local(self, role: str) -> str:
        """A verified local path for a role, materialized once per suite."""
        if role not in self._paths:
            if role == "reference":
                if self.source is None:
                    raise BadInput(f"{self.bundle_sha[:16]} has no recorded source: nothing to compare it with")
                self._paths[role] = str(materialize_source(self.res, self.source, self._scratch_dir() / "reference"))
            else:
                sha = self.identity(role)
                if sha is None:
                    raise BadInput(f"{self.bundle_sha[:16]} has no recorded {role.replace('_', ' ')}")
                self._paths[role] = str(self.res.store.open_verified_path(sha))
        return self._paths[role]

    def _scratch_dir(self) -> Path:
        if self._scratch is None:
            self.res.settings.work_dir.mkdir(parents=True, exist_ok=True)
            self._scratch = Path(tempfile.mkdtemp(prefix=f"gates-{owner_tag()}-", dir=self.res.settings.work_dir))
        return self._scratch

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        self._paths.clear()


def _values(ctx: SuiteContext, spec: GateSpec, target: str, where: ClassTarget, started_at: datetime,
            **rest: Any) -> dict[str, Any]:
    """The fields of a GateRecord only the orchestrator knows: the bytes, the gate, where it ran, when."""
    return dict(
        artifact_sha256=target, gate=spec.name, gate_version=spec.version, kind=spec.kind,
        **where.record(), toolchain_id=ctx.res.toolchain_id, started_at=started_at,
        finished_at=datetime.now(timezone.utc), **rest,
    )


def _unmeasured(ctx: SuiteContext, spec: GateSpec, target: str, where: ClassTarget, status: str, started_at: datetime,
                **rest: Any) -> GateRecord:
    """A result the runtime did not give (could_not_run, skipped): the suite's runtime named."""
    return GateRecord(**_values(ctx, spec, target, where, started_at, **rest), status=status, runtime="litert-lm-api",
                      runtime_version=ctx.runtime_version, backend="cpu")


def _record(res: Resources, record: GateRecord) -> dict[str, Any]:
    with res.db.session() as s:
        rid = record_gate_result(s, record)
    return {**record.recorded(rid).view(), "reused": False}


def run_gate(
    ctx: SuiteContext,
    spec: GateSpec,
    progress: Progress = stderr_progress,
    flow_run_id: str | None = None,
    recheck_id: int | None = None,
    reuse: bool = False,
    device: str | None = None,
) -> dict[str, Any] | None:
    """Run one gate on one CPU class (a class device's id; None: this host's) and record its result;
    the recorded result, or None when the gate does not apply to this bundle (no float export to
    compare, no tokenizer recorded). A measurement the toolchain could not carry out is recorded as
    `could_not_run` with its reason."""
    m = _measurement(ctx, spec, ctx.target(device))
    if m is None:
        return None
    if reuse and (found := _prior(ctx, m)) is not None:
        return found
    if not reuse:
        return _measure(ctx, spec, m, progress, flow_run_id, recheck_id)
    # Identical concurrent builds measure once: the others wait, then reuse the result.
    with lease(ctx.res, {"gate": m.key}, f"measuring {spec.name} on {m.target[:12]}"):
        if (found := _prior(ctx, m)) is not None:
            return found
        return _measure(ctx, spec, m, progress, flow_run_id, recheck_id)


def recorded_result(ctx: SuiteContext, spec: GateSpec, device: str | None = None) -> tuple[bool, dict[str, Any] | None]:
    """(applies, the result recorded for exactly this measurement on this class or None), measuring
    nothing: what a no-op build reads instead of running the gate (farm/recorded.py)."""
    m = _measurement(ctx, spec, ctx.target(device))
    return (False, None) if m is None else (True, _prior(ctx, m))


@dataclass(frozen=True)
class _Measurement:
    """One gate's measurement of these inputs on one CPU class: its request, and the key a recorded
    result is found by (the same bytes, gate and version, toolchain, runtime version, request digest
    and CPU class)."""

    req: Any
    where: ClassTarget
    target: str
    inputs: dict[str, Any]
    request_digest: str
    key: dict[str, Any]


def _measurement(ctx: SuiteContext, spec: GateSpec, where: ClassTarget) -> _Measurement | None:
    req = spec.build(ctx, ctx.config.params_for(spec))
    if req is None:
        return None
    target = ctx.float_sha if spec.target == "float" else ctx.bundle_sha
    inputs = {role: ctx.identity(role) for role in sorted(set(req.inputs.values()))}
    request_digest = digest({"gate": spec.name, "version": spec.version, "args": req.args, "inputs": inputs})
    key = {"artifact_sha256": target, "gate": spec.name, "gate_version": spec.version,
           "toolchain_id": ctx.res.toolchain_id, "runtime_version": ctx.runtime_version,
           "request_digest": request_digest, "cpu_class": where.view.key}
    return _Measurement(req, where, target, inputs, request_digest, key)


def _prior(ctx: SuiteContext, m: _Measurement) -> dict[str, Any] | None:
    with ctx.res.db.session() as s:
        found = prior_gate_result(s, **m.key)
    return None if found is None else {**found, "reused": True}


def _measure(ctx: SuiteContext, spec: GateSpec, m: _Measurement, progress: Progress, flow_run_id: str | None,
             recheck_id: int | None) -> dict[str, Any]:
    req, target, inputs, request_digest, where = m.req, m.target, m.inputs, m.request_digest, m.where
    request = {"gate": spec.name, **req.args, **{key: ctx.local(role) for key, role in req.inputs.items()}}
    if where.presentation is not None:
        request["cpu"] = where.presentation
    started = datetime.now(timezone.utc)
    asked = dict(config=req.args, inputs=inputs, request_digest=request_digest, flow_run_id=flow_run_id,
                 recheck_id=recheck_id)
    try:
        out = ctx.res.toolchain.call("gate", request, progress=progress)
    except FarmError as exc:
        return _record(ctx.res, _unmeasured(ctx, spec, target, where, "could_not_run", started, evidence=[str(exc)],
                                            findings=[f"The {spec.name} gate could not run: {exc}"], **asked))
    seen = out.get("cpu") or {}
    if seen.get("key") != where.view.key:
        # The class the runtime reported is what was measured; never record it as another.
        return _record(ctx.res, _unmeasured(
            ctx, spec, target, where, "could_not_run", started,
            evidence=[f"the runtime ran on {seen.get('label', 'an unknown class')}, not {where.view.label}"],
            findings=[f"The {spec.name} gate could not run on {where.view.label}: the runtime process reported "
                      "another CPU class"], **asked))
    return _record(ctx.res, GateRecord.from_answer(out, **_values(ctx, spec, target, where, started, **asked)))


def too_large_for(ctx: SuiteContext, where: ClassTarget) -> str | None:
    """Why a build does not gate this file on an emulated class (its device's max_bundle_mb), or None."""
    limit = getattr(where.device.runner, "max_bundle_mb", None)
    size_mb = (ctx.facts.get("size") or 0) / 2**20
    if limit is None or size_mb <= limit:
        return None
    return (f"not measured on {where.view.label} ({where.device.id}): the file is {size_mb:.0f} MB, over the "
            f"device's emulation limit of {limit:g} MB (emulation runs ~11-16x slower than native); "
            f"`farm gate {ctx.bundle_sha[:12]} --device {where.device.id}` measures it")


def record_skipped(ctx: SuiteContext, spec: GateSpec, where: ClassTarget, reason: str,
                   flow_run_id: str | None = None) -> dict[str, Any]:
    """A per-class gate a build did not run on a class, on record with the reason (never a silent gap:
    the card says the class was not measured)."""
    now = datetime.now(timezone.utc)
    return _record(ctx.res, _unmeasured(ctx, spec, ctx.bundle_sha, where, "skipped", now, evidence=[reason],
                                        findings=[reason], flow_run_id=flow_run_id))


def record_could_not_run(res: Resources, sha: str, spec: GateSpec, reason: str, flow_run_id: str | None = None,
                         recheck_id: int | None = None, where: ClassTarget | None = None) -> dict[str, Any]:
    """A gate that could not even be prepared for a bundle (its context or reference is gone), recorded
    with the reason and the class it was to run on (this host's when not given): a sibling that
    cannot be re-checked is on record, not skipped with a log line."""
    now = datetime.now(timezone.utc)
    where = where or host_target(res)
    return _record(res, GateRecord(
        artifact_sha256=sha, gate=spec.name, gate_version=spec.version, kind=spec.kind, status="could_not_run",
        runtime="litert-lm-api", runtime_version=str(res.toolchain.identity["packages"].get("litert-lm-api", "unknown")),
        backend="cpu", **where.record(), evidence=[reason], findings=[f"The {spec.name} gate could not run: {reason}"],
        toolchain_id=res.toolchain_id, flow_run_id=flow_run_id, recheck_id=recheck_id, started_at=now,
        finished_at=now))


def failure_line(result: dict[str, Any]) -> str:
    """One line naming the failing gate, the CPU class it failed on, and what failed it."""
    # A verdict of the kernels names its class, this host's own too (an AVX2 host's failure is
    # AVX2's); a gate that reads bytes, not answers (metadata, tokenizer_parity), names none.
    cpu = result.get("cpu") or {}
    per_class = result["gate"] in GATES and GATES.get(result["gate"]).per_class
    on = f" [{cpu['label']}]" if cpu.get("label") and (per_class or cpu.get("how", "native") != "native") else ""
    if result["status"] == "could_not_run":
        return (f"gate {result['gate']}{on} could not run on {result['artifact_sha256'][:12]}: "
                f"{(result.get('evidence') or ['?'])[0]}")
    m = result.get("metrics") or {}
    failed = m.get("checks_failed") or m.get("failed_checks") or m.get("failed") or None
    shown = ", ".join(f"{k}={v}" for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool))[:200]
    detail = f"failed: {failed}" if failed else shown
    first = (result.get("findings") or [""])[0]
    return f"gate {result['gate']}{on} failed on {result['artifact_sha256'][:12]} ({detail})" + (
        f": {first[:300]}" if first else "")
