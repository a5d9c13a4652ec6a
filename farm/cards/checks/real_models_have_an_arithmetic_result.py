"""A real model's current file (or a file carrying the arithmetic gate's sections byte for byte)
has a CPU arithmetic result. The seeds' apology: a recipe that broke CPU arithmetic, unmeasured."""

from __future__ import annotations

from farm.cards.checks.base import CARD_CHECKS, latest_own


@CARD_CHECKS.register("real_models_have_an_arithmetic_result", order=30)
def real_models_have_an_arithmetic_result(card, facts, markdown, devices) -> list[str]:
    """A real model's current file (or a file with its TFLite section) has a CPU arithmetic result."""
    out = []
    for v in facts["variants"]:
        current = v["history"][0]
        if ((v["lineage"].get("source") or {}).get("kind")) == "generated":
            continue  # random weights: arithmetic measures nothing
        from farm_common.gates import GATES

        needs = GATES.get("arithmetic").sections  # declared with the gate
        if not any(latest_own(h, "arithmetic") for h in v["history"]
                   if h["sha256"] == current["sha256"]
                   or all(current["sections"].get(t) and h["sections"].get(t) == current["sections"].get(t) for t in needs)):
            out.append(f"{v['lineage']['name']} {current['sha256'][:12]}: no CPU arithmetic / degeneration result on "
                       f"this file or on a file carrying its {', '.join(needs)} byte for byte (enable gates.arithmetic "
                       "and build)")
    return out
