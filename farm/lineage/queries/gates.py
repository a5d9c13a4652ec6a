"""Gate results and re-checks: the results on a file, the one to reuse for a measurement, the
siblings a failure re-checks, and the facts a release delta reads."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from farm.lineage.models import Artifact, ArtifactInput, GateResult, Recheck
from farm.lineage.queries.common import prebuilt
from farm.lineage.queries.devices import device_results
from farm.results import GateRecord


def result_dict(r: GateResult) -> dict[str, Any]:
    """A gate_results row as every reader gets it (farm/results.py GateRecord)."""
    return GateRecord.model_validate(r).view()


def gate_results(session: Session, shas: list[str]) -> list[dict[str, Any]]:
    """Every gate result on these artifacts, oldest first (each is a measurement of those bytes)."""
    rows = session.scalars(_q_gate_results(), {"shas": list(shas)})
    return [result_dict(r) for r in rows]


@prebuilt
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


@prebuilt
def _q_rechecks() -> Any:
    trig_ids = select(GateResult.id).where(GateResult.artifact_sha256 == bindparam("sha"))
    as_sibling = select(GateResult.recheck_id).where(GateResult.artifact_sha256 == bindparam("sha"),
                                                     GateResult.recheck_id.is_not(None))
    return select(Recheck).where(Recheck.trigger_result_id.in_(trig_ids) | Recheck.id.in_(as_sibling)).order_by(Recheck.id)


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
