"""The gate measurements, one module per gate, each registered by the gate's name.

A gate's contract (farm_common/gates/<gate>.py: its settings, spec and request builder) and this
half (farm_toolchain/gates/<gate>.py: the measurement) are joined by that one name; the gate's
settings and their defaults are one model both halves read (farm_common/gates/). The
toolchain command is `gate` (farm_toolchain/gate.py): `{"gate": name, ...the gate's request}`.

    @MEASUREMENTS.register("metadata")
    def measure(request: dict) -> dict: ...   # returns common.result(...)

A module whose one measurement serves two gates (logits parity of the float export and of the
bundle) registers it under both names. The helper modules (`common`, `degeneration`) register
nothing. Gate modules import only the standard library at module level (torch, transformers,
litert_lm inside the measurement), so listing the registry is cheap and the orchestrator's tests
can do it without the toolchain env."""

from __future__ import annotations

from typing import Any, Callable

from farm_common.registry import Registry
from farm_toolchain.protocol import BadInput

Measurement = Callable[[dict[str, Any]], dict[str, Any]]

MEASUREMENTS: Registry[Measurement] = Registry("gate", "farm_toolchain.gates", error=BadInput,
                                               support=("registry", "common", "degeneration", "images"))
