"""`gate`: run one gate's measurement, `{"gate": name, ...the gate's request}` (the measurements
register themselves: farm_toolchain/gates/registry.py). `python -m farm_toolchain gate <
request.json` runs one by hand."""

from __future__ import annotations

from typing import Any

from farm_toolchain.commands import COMMANDS, OFFLINE
from farm_toolchain.gates.registry import MEASUREMENTS


# Gates read local folders only: the bundle, the recorded reference, never the hub.
@COMMANDS.register("gate", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    measure = MEASUREMENTS.get(request.get("gate"))
    return measure({k: v for k, v in request.items() if k != "gate"})
