"""A CPU verdict names its class (issue 34): the same bytes answer differently on another CPU class,
so "verified on CPU" without the class is a claim no measurement backs. Re-derived from the raw gate
rows of the current files (not from the card's own class table):

- CARD.md never says "verified on CPU" (or "CPU: verified") without a class;
- every class the card lists as verified has every answer-dependent gate passing on this file's
  bytes on that class, and a class with a failing one is not listed as verified;
- every class with results on the current file appears in the card.
"""

from __future__ import annotations

import re

from farm.cards.checks.base import CARD_CHECKS
from farm.cards.classes import per_class_gates
from farm_common.wire import WORKS

BARE = re.compile(r"verified on (the )?CPU(?!\s*class)(?![^\n]*(x86-64|arm64))|CPU:\s*verified", re.IGNORECASE)


def _raw_classes(facts) -> dict[str, dict[str, dict[str, str]]]:
    """{file name: {class label: {gate: newest status}}} from each current file's own raw rows."""
    gates = per_class_gates()
    out: dict[str, dict[str, dict[str, str]]] = {}
    for v in facts["variants"]:
        current = v["history"][0]
        name = v["lineage"]["name"]
        classes = out.setdefault(name, {})
        for g in current["gates"]:  # oldest first: the newest wins
            if g["gate"] in gates and g.get("cpu_class") and g.get("recheck_id") is None \
                    and g["artifact_sha256"] == current["sha256"]:
                label = (g.get("cpu") or {}).get("label") or g["cpu_class"]
                classes.setdefault(label, {})[g["gate"]] = g["status"]
    return out


@CARD_CHECKS.register("cpu_classes_are_named", order=15)
def cpu_classes_are_named(card, facts, markdown, devices) -> list[str]:
    out = []
    for m in BARE.finditer(markdown):
        line = markdown[markdown.rfind("\n", 0, m.start()) + 1: markdown.find("\n", m.end())]
        out.append(f"the card says {m.group(0)!r} without naming the CPU class: {line.strip()[:160]!r}")
    for name, classes in _raw_classes(facts).items():
        for label, statuses in classes.items():
            measured = {g: s for g, s in statuses.items() if s != "skipped"}
            failing = sorted(g for g, s in measured.items() if s not in WORKS)
            row = next((ln for ln in markdown.splitlines()
                        if ln.startswith(f"| `{name}` | {label} |") and "How, where" not in ln), None)
            if row is None:
                out.append(f"`{name}` has results on {label} that the card's CPU classes table does not list")
            elif failing and "| verified |" in row:
                out.append(f"`{name}` is listed as verified on {label}, but {', '.join(failing)} did not pass there")
            elif not measured and "| verified |" in row:
                out.append(f"`{name}` is listed as verified on {label}, where nothing was measured")
            elif measured and not failing and "| verified |" not in row:
                out.append(f"`{name}` passed every answer-dependent gate on {label}, but the card does not say so")
    return out
