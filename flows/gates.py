"""Gate flows: the suite on one bundle, and the sibling re-check a failure triggers.

`gate_suite` runs each gate as its own task (visible one by one in the Prefect UI) and records every
result. When a gate fails, `recheck_siblings` runs as a subflow: every other bundle made with the same
recipe (digest) runs the gates of the failed gate's kind, and a re-check record links the failure to
those runs — the seeds' "when one file is found defective, the other files made with the same recipe
are re-checked", made automatic."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from farm.config import GateConfig
from farm.gates import BY_NAME, of_kind, select
from farm.lineage.models import Artifact, GateResult
from farm.lineage.queries import siblings
from farm.lineage.record import record_recheck
from farm.resources import get_resources
from tasks.gates import gate_task


@flow(name="gate-suite")
def gate_suite(
    sha256: str,
    gates: list[str] | None = None,
    config: GateConfig | None = None,
    recheck_failures: bool = True,
    reuse: bool = False,
) -> dict[str, Any]:
    cfg = config or GateConfig()
    chosen = select(gates, skip=cfg.skip, with_optional=bool(cfg.questions))
    results = [r for g in chosen if (r := gate_task(sha256, g.name, config, None, reuse)) is not None]
    # A failure already re-checked (a reused result) does not trigger another re-check.
    failed = [r for r in results if r["status"] == "fail" and not r.get("reused")]
    rechecks = []
    if recheck_failures:
        for kind in sorted({r["kind"] for r in failed}):
            trigger = next(r for r in failed if r["kind"] == kind)
            rechecks.append(recheck_siblings(trigger["id"]))
    return {"sha256": sha256, "results": results, "rechecks": rechecks}


@flow(name="recheck-siblings")
def recheck_siblings(trigger_result_id: int) -> dict[str, Any]:
    res = get_resources()
    log = get_run_logger()
    with res.db.session() as s:
        trigger = s.get(GateResult, trigger_result_id)
        art = s.get(Artifact, trigger.artifact_sha256)
        # A float-export result's siblings are those of the bundles made from it.
        bundle_sha = art.sha256 if art.kind == "litertlm" else _bundle_of(s, art.sha256)
        bundle = s.get(Artifact, bundle_sha) if bundle_sha else None
        if bundle is None or bundle.recipe_digest is None:
            log.info("no recipe to re-check siblings by for %s", trigger.artifact_sha256[:12])
            return {"trigger_result_id": trigger_result_id, "siblings": [], "results": []}
        sibs = siblings(s, bundle.sha256)
        recheck_id = record_recheck(
            s, trigger_result_id=trigger_result_id, recipe_digest=bundle.recipe_digest, kind=trigger.kind,
            siblings=sibs, flow_run_id=flow_run.id,
        )
        kind = trigger.kind
    log.info("gate %s failed on %s: re-checking %d sibling(s) made with the same recipe",
             trigger.gate, trigger.artifact_sha256[:12], len(sibs))
    results = []
    for sib in sibs:
        for g in of_kind(kind):
            if g.optional:
                continue
            try:
                r = gate_task(sib, g.name, None, recheck_id)
            except Exception as exc:  # noqa: BLE001 - one sibling that cannot run does not stop the others
                log.warning("re-check of %s with %s could not run: %s", sib[:12], g.name, exc)
                continue
            if r is not None:
                results.append({"artifact_sha256": sib, "gate": g.name, "status": r["status"], "result_id": r["id"]})
    return {"recheck_id": recheck_id, "trigger_result_id": trigger_result_id, "siblings": sibs, "results": results}


def _bundle_of(session, float_sha: str) -> str | None:
    from sqlalchemy import select

    from farm.lineage.models import ArtifactInput

    quant = session.scalars(select(ArtifactInput.artifact_sha256).where(
        ArtifactInput.input_sha256 == float_sha, ArtifactInput.role == "float_model")).first()
    if quant is None:
        return None
    return session.scalars(select(ArtifactInput.artifact_sha256).where(
        ArtifactInput.input_sha256 == quant, ArtifactInput.role == "model")).first()


__all__ = ["gate_suite", "recheck_siblings", "BY_NAME"]
