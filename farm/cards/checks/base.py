"""Mechanical checks before a card is published (`farm card --check`, and always before publishing).
Each failure names the claim and the measurement it lacks. The seed cards' apologies, one per check:
a phone listed as verified that never ran the file; a one-Engine-per-conversation warning two months
late; a CPU arithmetic defect nobody measured; a "fits" nobody measured; files of a failed recipe
not re-checked; TODO strings in a published card.

One module per check (`farm/cards/checks/<check>.py`), registered with
`@CARD_CHECKS.register(name, order=N)`: a function of (card.json, the model's facts, CARD.md, the
devices' facts) that returns its failures. `tests/unit/farm/cards/test_cards.py` fails when a
check has no negative control there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from farm_common.registry import Registry

# (card.json, the model's facts from lineage, CARD.md, the device registry's facts) -> failures
Check = Callable[[dict, dict, str, dict], list[str]]


@dataclass(frozen=True)
class CardCheck:
    name: str
    check: Check
    order: int  # failures are listed in this order


CARD_CHECKS: Registry[CardCheck] = Registry(
    "card check", "farm.cards.checks", make=lambda name, fn, attrs: CardCheck(name, fn, **attrs),
    order=lambda c: c.order, support=("base",))


def run_checks(card: dict[str, Any], facts: dict[str, Any], markdown: str, devices: dict[str, Any]) -> list[str]:
    failures = []
    for c in CARD_CHECKS:
        failures += [f"{c.name}: {f}" for f in c.check(card, facts, markdown, devices)]
    return failures


def latest_own(h: dict, gate: str | None = None) -> list[dict]:
    """The newest result per (gate, runtime version, CPU class) recorded on the file itself (no re-checks)."""
    latest: dict = {}
    for g in h["gates"]:
        if g.get("recheck_id") is None and g["artifact_sha256"] == h["sha256"] and gate in (None, g["gate"]):
            latest[(g["gate"], g["runtime_version"], g.get("cpu_class"))] = g
    return list(latest.values())
