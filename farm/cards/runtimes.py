"""Which litert-lm releases each current file works on, from lineage: every gate result recorded on
the file's own bytes, grouped by the runtime release that ran it (the build's own, and each release
`farm revalidate` re-measured it with). The seeds wrote this by hand ("Requires litert-lm ≥ 0.15 (both
backends gated on 0.15.0 and 0.16.0 …)"); here it is a table and a sentence that say only what the
results say: a release with no result on the file is not a row, and "requires ≥ X" is written only
where an older release was measured failing.
"""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version

from farm_common.wire import WORKS, worst


def _key(v: str) -> Any:
    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


def release_rows(variant: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per runtime release with a result on this file's bytes, oldest release first:
    {release, verdict, gates, failing, by, date}."""
    rec = variant["lineage"]
    built_with = (rec.get("toolchain") or {}).get("id")
    built_runtime = ((rec.get("toolchain") or {}).get("packages") or {}).get("litert-lm")
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for g in rec["gates"]:  # oldest first: the newest result per (gate, release) wins
        if g["artifact_sha256"] == rec["sha256"] and g.get("recheck_id") is None and g["status"] != "skipped":
            newest[(g["gate"], g["runtime_version"])] = g
    rows = []
    for release in sorted({k[1] for k in newest}, key=_key):
        results = [g for (gate, r), g in sorted(newest.items()) if r == release]
        verdict = worst(g["status"] for g in results)  # a release's verdict on a file is its worst gate
        rows.append({"release": release, "verdict": verdict, "gates": len(results),
                     "failing": sorted(g["gate"] for g in results if g["status"] not in WORKS),
                     "by": _by(results, built_with, built_runtime),
                     "date": max(g["finished_at"] for g in results)[:10]})
    return rows


def _by(results: list[dict[str, Any]], built_with: str | None, built_runtime: str | None) -> str:
    """Who measured: "build" (the toolchain env that built the file), "re-validation" (another
    litert-lm release's env, as `farm revalidate` makes), else "a later gate run" (`farm gate`)."""
    if built_with is not None and all(g.get("toolchain_id") == built_with for g in results):
        return "build"
    if built_runtime is not None and results[0]["runtime_version"] != built_runtime:
        return "re-validation"
    return "a later gate run"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the rows support: the releases it works on, the oldest checked, the release where a
    verdict changed from the release before it, and `requires` (the oldest release from which every
    checked release works, only when an older one was measured failing)."""
    out: dict[str, Any] = {"works_on": [r["release"] for r in rows if r["verdict"] in WORKS],
                           "fails_on": [r["release"] for r in rows if r["verdict"] not in WORKS],
                           "oldest": rows[0]["release"] if rows else None, "changed": [], "requires": None}
    for before, after in zip(rows, rows[1:]):
        if (before["verdict"] in WORKS) != (after["verdict"] in WORKS):
            out["changed"].append({"release": after["release"], "from": before["verdict"], "to": after["verdict"],
                                   "previous": before["release"]})
    tail = 0
    while tail < len(rows) and rows[len(rows) - 1 - tail]["verdict"] in WORKS:
        tail += 1
    if 0 < tail < len(rows):  # the newest releases work and an older one was measured failing
        out["requires"] = rows[len(rows) - tail]["release"]
    return out


def section(facts: dict[str, Any]) -> list[str]:
    """CARD.md's "Runtime compatibility" section."""
    lines = ["", "## Runtime compatibility", "",
             "Each current file on each litert-lm release that gated it (CPU backend; the worst gate decides). A "
             "release without a row was not measured on this file.", "",
             "| File | litert-lm | Verdict | Gates | Not passing | By | When |", "|---|---|---|---|---|---|---|"]
    sentences = []
    for v in facts["variants"]:
        name = v["lineage"]["name"]
        rows = release_rows(v)
        for r in rows:
            lines.append(f"| `{name}` | {r['release']} | {r['verdict']} | {r['gates']} | "
                         f"{', '.join(r['failing']) or '—'} | {r['by']} | {r['date']} |")
        if not rows:
            sentences.append(f"`{name}`: no gate result on this file yet.")
            continue
        s = summary(rows)
        text = f"`{name}`: checked on litert-lm {', '.join(r['release'] for r in rows)} (oldest {s['oldest']})"
        text += f"; works on {', '.join(s['works_on'])}" if s["works_on"] else "; works on none of them"
        if s["fails_on"]:
            text += f"; fails on {', '.join(s['fails_on'])}"
        for c in s["changed"]:
            text += f"; the verdict changed at {c['release']} ({c['from']} on {c['previous']} → {c['to']})"
        if s["requires"]:
            text += f". Requires litert-lm ≥ {s['requires']}"
        sentences.append(text + ".")
    return lines + [""] + [f"- {t}" for t in sentences]
