"""Every row of the card's Runtime compatibility table is a litert-lm release with a gate result
recorded on that file's own bytes, with the verdict those results give, and a "Requires litert-lm ≥
X" stands only where an older release was measured failing on the file. The seeds wrote "requires
≥ 0.15" by hand; a release nobody gated the file on is not a release it works on. Re-derived here
from the raw results (facts["history"]), not from the table's own code."""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from farm.cards.checks.base import CARD_CHECKS, latest_own
from farm_common.wire import WORKS, worst

_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \| (?P<release>[^ |]+) \| (?P<verdict>[a-z_]+) \|")
_REQUIRES = re.compile(r"^- `(?P<file>[^`]+)`:.*Requires litert-lm ≥ (?P<release>[^ .]+(?:\.[0-9A-Za-z]+)*)\.$")


def _recorded(variant) -> dict[str, str]:
    """{release: worst status of its newest result per gate} on the file's own bytes."""
    out: dict[str, str] = {}
    for g in latest_own(variant["history"][0]):
        if g["status"] == "skipped":
            continue
        release, status = g["runtime_version"], g["status"]
        out[release] = worst([out[release], status] if release in out else [status])
    return out


@CARD_CHECKS.register("runtime_rows_are_measured", order=27)
def runtime_rows_are_measured(card, facts, markdown, devices) -> list[str]:
    if "## Runtime compatibility" not in markdown:
        return ["the card has no Runtime compatibility section"]
    text = markdown.split("## Runtime compatibility", 1)[1].split("\n## ", 1)[0]
    by_name = {v["lineage"]["name"]: _recorded(v) for v in facts["variants"]}
    out = []
    for line in text.splitlines():
        if m := _ROW.match(line):
            recorded = by_name.get(m["file"])
            if recorded is None:
                out.append(f"a row names {m['file']}, which is not a current file of this card")
            elif m["release"] not in recorded:
                out.append(f"{m['file']} has a row for litert-lm {m['release']}, but no gate result on its bytes "
                           "was measured with that release")
            elif recorded[m["release"]] != m["verdict"]:
                out.append(f"{m['file']} on litert-lm {m['release']} is printed {m['verdict']}, but its recorded "
                           f"results say {recorded[m['release']]}")
        elif m := _REQUIRES.match(line):
            recorded = by_name.get(m["file"]) or {}
            try:
                floor = Version(m["release"])
                older = [r for r, s in recorded.items() if Version(r) < floor and s not in WORKS]
            except InvalidVersion:
                older = []
            if not older:
                out.append(f"{m['file']}: 'Requires litert-lm ≥ {m['release']}' without an older release measured "
                           "failing on its bytes")
    for name, recorded in by_name.items():
        for release in recorded:
            if f"| `{name}` | {release} |" not in text:
                out.append(f"{name} was gated on litert-lm {release}, which the Runtime compatibility table leaves out")
    return out
