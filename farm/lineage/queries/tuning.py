"""Recipe searches and quality measurements (farm tune, farm sensitivity)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session


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


def tune_dict(row: Any) -> dict[str, Any]:
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
    return [tune_dict(r) for r in session.scalars(q, {"model": model_id, "bundle": bundle_sha256})]


@functools.lru_cache(maxsize=16)
def _q_tune_searches(by_model: bool, by_bundle: bool, limit: int) -> Any:
    from farm.lineage.models import TuneSearch

    q = select(TuneSearch).order_by(TuneSearch.id.desc()).limit(limit)
    if by_model:
        q = q.where(TuneSearch.model_id == bindparam("model"))
    if by_bundle:
        q = q.where(TuneSearch.bundle_sha256 == bindparam("bundle"))
    return q
