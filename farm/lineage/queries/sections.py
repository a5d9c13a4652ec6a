"""Sections: what a bundle carries section by section, which files share a section byte for byte,
and how two files differ."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from farm.lineage.models import Artifact, Section
from farm.lineage.queries.common import prebuilt

SHARED_SHOWN = 50  # files listed per shared section in a lineage record


def sections_of(session: Session, sha: str) -> list[dict[str, Any]]:
    rows = session.scalars(_q_sections_of(), {"sha": sha})
    return [section_dict(s) for s in rows]


@prebuilt
def _q_sections_of() -> Any:
    return select(Section).where(Section.artifact_sha256 == bindparam("sha")).order_by(Section.idx)


def section_dict(s: Section) -> dict[str, Any]:
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
def sharers_statement(n: int) -> Any:
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
