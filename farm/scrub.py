"""`farm store verify [--repair]`: the scrub `git fsck` and `restic check` give their users.

Every object lineage names (each artifact, each file of each recorded source) is hashed in full
against its name: ok, missing or corrupt; objects the store holds that lineage does not name are
orphans (a build killed between storing and recording, or another farm's objects in a shared bucket).

With repair: a corrupt object is moved to the store's quarantine (kept for the record); a source file
that is missing or was corrupt is put back from its recorded folder when that copy still hashes to the
recorded sha256; every stage-cache row whose output is still not in the store is dropped, so the
next build runs that stage again and makes the bytes anew. Orphans are reported, never deleted (they
may be another farm's).
"""

from __future__ import annotations

from typing import Any

from farm.lineage.queries.artifacts import named_objects, source_file_copies
from farm.lineage.record import forget_cache_outputs
from farm.resources import Resources
from farm.store import hash_file


def scrub(res: Resources, repair: bool = False, progress=lambda _line: None) -> dict[str, Any]:
    with res.db.session() as s:
        named = named_objects(s)
        sources = source_file_copies(s)
    state: dict[str, str] = {}
    for i, sha in enumerate(sorted(named), start=1):
        state[sha] = res.store.verify(sha, full=True)
        if state[sha] != "ok":
            progress(f"{state[sha]:<8} {sha[:16]}  {'; '.join(named[sha])}")
    orphaned = sorted(set(res.store.list_objects()) - set(named))
    repaired: list[dict[str, Any]] = []
    if repair:
        for sha in [x for x, st in state.items() if st == "corrupt"]:
            repaired.append({"sha256": sha, "action": "quarantined", "to": res.store.quarantine(sha)})
            state[sha] = "missing"
        for sha in [x for x, st in state.items() if st == "missing"]:
            for path in sources.get(sha, []):
                if path.is_file() and hash_file(path)[0] == sha:
                    res.store.put_file(path)
                    state[sha] = "ok"
                    repaired.append({"sha256": sha, "action": "restored", "from": str(path)})
                    break
        gone = [x for x, st in state.items() if st != "ok"]
        with res.db.session() as s:
            dropped = forget_cache_outputs(s, gone)
        if dropped:
            repaired.append({"action": "stage cache rows dropped (those stages run again)", "rows": dropped})
    bad = {st: sorted(x for x, v in state.items() if v == st) for st in ("missing", "corrupt")}
    return {
        "store": res.store.url,
        "objects": len(named),
        "ok": sum(v == "ok" for v in state.values()),
        "missing": [{"sha256": x, "named_by": named[x]} for x in bad["missing"]],
        "corrupt": [{"sha256": x, "named_by": named[x]} for x in bad["corrupt"]],
        "orphaned": orphaned,
        "repaired": repaired,
    }
