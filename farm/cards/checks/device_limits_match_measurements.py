"""Every "peaked at N MB of M MB RAM" statement matches a measured run, and every measured limit is
stated. The seeds' apology: a "fits" nobody measured."""

from __future__ import annotations

import re

from farm.cards.checks.base import CARD_CHECKS
from farm.cards.render import device_limits


@CARD_CHECKS.register("device_limits_match_measurements", order=40)
def device_limits_match_measurements(card, facts, markdown, devices) -> list[str]:
    out = [f"the card does not state the measured limit: {s!r}" for s in device_limits(facts, devices)
           if s not in markdown]
    for line in re.findall(r"peaked at (\d+) MB of (\d+) MB RAM", markdown):
        peak, ram = int(line[0]), int(line[1])
        if not any(d.get("peak_mem_mb") and round(d["peak_mem_mb"]) == peak and (devices.get(d["device_id"]) or {})
                   .get("ram_mb") == ram for v in facts["variants"] for d in v["devices"]):
            out.append(f"the statement 'peaked at {peak} MB of {ram} MB RAM' matches no measured run")
    return out
