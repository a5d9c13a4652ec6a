"""What a card and a publication read as current: the newest card of a model, and the head of
each bundle's version chain (its current file, the text build beside an image bundle, the files it
superseded)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from farm.lineage.models import Artifact
from farm.lineage.queries.common import brief_of
from farm.lineage.queries.sections import sections_of


def latest_card(session: Session, model_id: str) -> dict[str, Any] | None:
    """The newest published card of a model (the head of its `card/<model id>` chain)."""
    a = session.scalars(select(Artifact).where(Artifact.chain == f"card/{model_id}")
                        .order_by(Artifact.chain_seq.desc()).limit(1)).first()
    if a is None:
        return None
    return {**brief_of(a), "created_at": a.created_at.isoformat(), "details": a.details,
            "version": a.chain_seq}


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
            return {**brief_of(other), "sections": sections_of(session, head)}
    return None


def published_bundles(session: Session) -> list[str]:
    """The current file of every variant of every model (the head of each bundle chain): what a
    re-validation re-measures."""
    return _chain_heads(session)


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
