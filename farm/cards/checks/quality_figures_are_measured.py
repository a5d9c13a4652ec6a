"""Every figure of the card's Quality table is a recorded task_accuracy result of that file (or of a
file carrying its measured sections byte for byte): a score quoted for bytes that never answered
the questions is the seeds' apology (numbers quoted for files that had changed)."""

from __future__ import annotations

import re

from farm.cards.checks.base import CARD_CHECKS, latest_own

_ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<float>\d+)/(?P<n>\d+) \(\d+ %\) \| (?P<bundle>\d+)/\d+ \(\d+ %\) \| "
                  r"(?P<kept>\d+) of \d+ \| (?P<lost>\d+) \(allowed (?P<allowed>\d+)\) \| (?P<gained>\d+) \|")


@CARD_CHECKS.register("quality_figures_are_measured", order=35)
def quality_figures_are_measured(card, facts, markdown, devices) -> list[str]:
    from farm_common.gates import GATES

    needs = GATES.get("task_accuracy").sections
    section = markdown.split("## Quality", 1)[1].split("\n## ", 1)[0] if "## Quality" in markdown else ""
    out = []
    for line in section.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        v = next((v for v in facts["variants"] if v["lineage"]["name"] == m["name"]), None)
        if v is None:
            out.append(f"the Quality table names {m['name']}, which is not a current file of this model")
            continue
        current = v["history"][0]
        claimed = {k: int(m[k]) for k in ("float", "n", "bundle", "kept", "lost", "allowed", "gained")}
        measured = [
            {"float": g["metrics"].get("float_right"), "n": g["metrics"].get("questions"),
             "bundle": g["metrics"].get("bundle_right"), "kept": g["metrics"].get("kept"), "lost": g["metrics"].get("lost"),
             "allowed": g["metrics"].get("max_lost"), "gained": g["metrics"].get("gained")}
            for h in v["history"]
            if h["sha256"] == current["sha256"]
            or all(current["sections"].get(t) and h["sections"].get(t) == current["sections"].get(t) for t in needs)
            for g in latest_own(h, "task_accuracy")]
        if claimed not in measured:
            out.append(f"{m['name']} {current['sha256'][:12]}: the Quality row ({claimed['float']}/{claimed['n']} float, "
                       f"{claimed['bundle']}/{claimed['n']} file, {claimed['lost']} lost) matches no task_accuracy result "
                       "recorded on this file or on a file carrying its sections byte for byte")
    return out
