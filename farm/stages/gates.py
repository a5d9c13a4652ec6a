"""Run correctness gates on one bundle and record every result (a failure is data, not an error).

The gate measures the exact bytes lineage names: the bundle from the store (its TFLite section for
logits parity), the float export from the store, the source's tokenizer.json as stored at build time.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from farm.config import GateConfig
from farm.errors import BadInput, BuildFailed
from farm.families import Family, get_family
from farm.gates import Gate
from sqlalchemy import select

from farm.lineage.models import Artifact, ArtifactInput, GateResult, Source
from farm.lineage.queries import result_dict
from farm.lineage.record import record_gate_result
from farm.resources import Resources
from farm.stages.common import Progress, stderr_progress

DEVICE = f"local-cpu ({platform.machine()}, {platform.node()})"


@dataclass
class GateContext:
    """What the gates of one bundle need, resolved from lineage and the store."""

    bundle_sha: str
    bundle_path: Path
    float_sha: str | None
    source_dir: Path | None
    tokenizer_json: Path | None
    family: Family | None
    prefill_lengths: list[int]
    cache_length: int | None
    config: GateConfig

    @property
    def prefill_length(self) -> int:
        return min(self.prefill_lengths) if self.prefill_lengths else 8


def gate_context(res: Resources, sha: str, config: GateConfig | None = None) -> GateContext:
    with res.db.session() as s:
        art = s.get(Artifact, sha)
        if art is None or art.kind != "litertlm":
            raise BadInput(f"{sha[:16]} is not a recorded .litertlm bundle: gates run on bundles")
        src: Source | None = art.source
        tok = s.get(ArtifactInput, (sha, "tokenizer"))
        model = s.get(ArtifactInput, (sha, "model"))
        float_edge = s.get(ArtifactInput, (model.input_sha256, "float_model")) if model else None
        meta = (art.details or {}).get("metadata") or {}
        recorded_cfg = (art.details or {}).get("gates_config")
        family = get_family(src.family) if src is not None else None
        source_dir = Path(src.path) if src is not None and src.path else None
    cfg = config or (GateConfig.model_validate(recorded_cfg) if recorded_cfg else GateConfig())
    return GateContext(
        bundle_sha=sha,
        bundle_path=res.store.open_verified_path(sha),
        float_sha=float_edge.input_sha256 if float_edge else None,
        source_dir=source_dir,
        tokenizer_json=res.store.open_verified_path(tok.input_sha256) if tok else None,
        family=family,
        prefill_lengths=list(meta.get("prefill_lengths") or []),
        cache_length=meta.get("cache_length"),
        config=cfg,
    )


def _need_source(ctx: GateContext, gate: Gate) -> str:
    if ctx.source_dir is None or not (ctx.source_dir / "config.json").is_file():
        raise BuildFailed(
            f"gate {gate.name} needs the source model folder {ctx.source_dir} (the PyTorch reference), "
            "which is gone: build the config again to restore it"
        )
    return str(ctx.source_dir)


def gate_request(res: Resources, ctx: GateContext, gate: Gate) -> tuple[str, dict[str, Any]] | None:
    """(artifact sha the result describes, toolchain request), or None when the gate cannot apply."""
    cfg = ctx.config
    thresholds = cfg.thresholds.get(gate.name, {})
    bundle = str(ctx.bundle_path)
    if gate.name == "logits_parity_float":
        if ctx.float_sha is None:
            return None  # an imported bundle: no float export of ours to compare
        return ctx.float_sha, {
            "model_dir": _need_source(ctx, gate),
            "tflite_path": str(res.store.open_verified_path(ctx.float_sha)),
            "label": "float",
            "positions": cfg.positions,
            "prefill_length": ctx.prefill_length,
            "thresholds": thresholds,
        }
    if gate.name == "logits_parity":
        return ctx.bundle_sha, {
            "model_dir": _need_source(ctx, gate),
            "bundle_path": bundle,
            "label": "quantized",
            "positions": cfg.positions,
            "prefill_length": ctx.prefill_length,
            "thresholds": thresholds,
        }
    if gate.name == "generation_parity":
        return ctx.bundle_sha, {
            "bundle_path": bundle,
            "model_dir": _need_source(ctx, gate),
            "prompts": cfg.prompts,
            "max_tokens": cfg.max_tokens,
            "apply_chat_template": cfg.chat_template,
            "min_prefix_tokens": cfg.min_prefix_tokens,
            **thresholds,  # min_match_fraction, tie_margin
        }
    if gate.name == "questions":
        if not cfg.questions:
            return None
        return ctx.bundle_sha, {
            "bundle_path": bundle,
            "questions": [q.model_dump() for q in cfg.questions],
            "max_tokens": cfg.question_max_tokens,
            **thresholds,  # min_pass_fraction
        }
    if gate.name == "tokenizer_parity":
        if ctx.tokenizer_json is None:
            return None
        return ctx.bundle_sha, {"bundle_path": bundle, "tokenizer_json": str(ctx.tokenizer_json)}
    if gate.name == "prompt_lengths":
        return ctx.bundle_sha, {"bundle_path": bundle, "model_dir": _need_source(ctx, gate)}
    if gate.name in ("multi_turn", "state_isolation"):
        return ctx.bundle_sha, {"bundle_path": bundle, "model_dir": _need_source(ctx, gate)}
    if gate.name == "metadata":
        return ctx.bundle_sha, {
            "bundle_path": bundle,
            "tokenizer_json": str(ctx.tokenizer_json) if ctx.tokenizer_json else None,
            "end_of_turn": ctx.family.end_of_turn if ctx.family else None,
            "recurrent_state": bool(ctx.family and ctx.family.recurrent_state),
        }
    raise BadInput(f"no request builder for gate {gate.name!r}")


def run_gate(
    res: Resources,
    ctx: GateContext,
    gate: Gate,
    progress: Progress = stderr_progress,
    flow_run_id: str | None = None,
    recheck_id: int | None = None,
    reuse: bool = False,
) -> dict[str, Any] | None:
    """Run one gate and record its result; returns the recorded result (None if it does not apply).
    With reuse, a result already recorded for the same bytes, gate version and toolchain (runtime
    included) is returned instead of measuring again (a no-op rebuild re-measures nothing)."""
    built = gate_request(res, ctx, gate)
    if built is None:
        return None
    target_sha, request = built
    if reuse:
        with res.db.session() as s:
            prior = s.scalars(
                select(GateResult)
                .where(GateResult.artifact_sha256 == target_sha, GateResult.gate == gate.name,
                       GateResult.gate_version == gate.version, GateResult.toolchain_id == res.toolchain_id)
                .order_by(GateResult.id.desc()).limit(1)
            ).first()
            if prior is not None:
                return {**result_dict(prior), "reused": True}
    started = datetime.now(timezone.utc)
    out = res.toolchain.call(gate.command, request, progress=progress)
    finished = datetime.now(timezone.utc)
    runtime = out.get("runtime") or {}
    values = dict(
        artifact_sha256=target_sha,
        gate=gate.name,
        gate_version=gate.version,
        kind=gate.kind,
        status=out["status"],
        runtime=runtime.get("package", "litert-lm-api"),
        runtime_version=runtime.get("version", "unknown"),
        backend=out.get("backend", "cpu"),
        device=DEVICE,
        metrics=out.get("metrics", {}),
        evidence=out.get("evidence", []),
        findings=out.get("findings", []),
        config={k: v for k, v in request.items() if k not in ("bundle_path", "model_dir", "tflite_path", "tokenizer_json")},
        toolchain_id=res.toolchain_id,
        flow_run_id=flow_run_id,
        recheck_id=recheck_id,
        started_at=started,
        finished_at=finished,
    )
    with res.db.session() as s:
        rid = record_gate_result(s, **values)
    return {"id": rid, **values, "started_at": started.isoformat(), "finished_at": finished.isoformat()}


def failure_line(result: dict[str, Any]) -> str:
    """One line naming the failing gate and the metric that failed it."""
    m = result.get("metrics") or {}
    failed = m.get("checks_failed") or m.get("failed_checks") or m.get("failed") or None
    shown = ", ".join(f"{k}={v}" for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool))[:200]
    detail = f"failed: {failed}" if failed else shown
    return f"gate {result['gate']} failed on {result['artifact_sha256'][:12]} ({detail})"
