"""Gate measurements, one module per gate, each registered by the gate's name.

The orchestrator's half of a gate (farm/gates/<gate>.py: its spec, parameters and request builder)
and this half (farm_toolchain/gates/<gate>.py: the measurement) are joined by that one name. The
toolchain command is `gate`: `{"gate": name, ...the gate's request}` (`python -m farm_toolchain gate
< request.json` runs one by hand). Adding a gate is one module on each side; tests/test_gate_registry.py
fails when either half is missing.

    @register("metadata")
    def measure(request: dict) -> dict: ...   # returns common.result(...)

Helper modules (`common`, `degeneration`) register nothing. Gate modules import only the standard
library at module level (torch, transformers, litert_lm inside the measurement), so listing the
registry is cheap and the orchestrator's tests can do it without the toolchain env.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

from farm_toolchain.protocol import BadInput

Measurement = Callable[[dict[str, Any]], dict[str, Any]]
HELPERS = frozenset({"common", "degeneration"})
_MEASUREMENTS: dict[str, Measurement] = {}


def register(*names: str) -> Callable[[Measurement], Measurement]:
    """Register a measurement under one or more gate names (a module whose one measurement serves two
    gates, e.g. logits parity of the float export and of the bundle, registers both)."""

    def decorate(fn: Measurement) -> Measurement:
        for name in names:
            other = _MEASUREMENTS.get(name)
            if other is not None and other is not fn:
                raise RuntimeError(f"gate {name!r} is registered twice: {other.__module__} and {fn.__module__}")
            _MEASUREMENTS[name] = fn
        return fn

    return decorate


def load_all() -> dict[str, Measurement]:
    """Import every gate module of this package (registering its measurements); name -> measurement."""
    for info in pkgutil.iter_modules(__path__):
        if info.name not in HELPERS and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(_MEASUREMENTS)


def handle(request: dict[str, Any]) -> dict[str, Any]:
    """The `gate` command: run the measurement named by request["gate"]."""
    name = request.get("gate")
    measurements = load_all()
    if name not in measurements:
        raise BadInput(f"unknown gate {name!r}: the toolchain measures {', '.join(sorted(measurements))}")
    return measurements[name]({k: v for k, v in request.items() if k != "gate"})
