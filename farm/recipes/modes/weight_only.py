"""weight_only: integer weights dequantized before a float op (compute precision FLOAT, an explicit
DEQUANTIZE op in front of the op, which the read-back finds)."""

from __future__ import annotations

from typing import Any

from farm.recipes.modes.registry import MODES, OP_CONFIG_TAIL, Mode


@MODES.register("weight_only")
class WeightOnly(Mode):
    def op_config(self, rule: Any) -> dict[str, Any]:
        return {"weight_tensor_config": rule.weights.render(), "compute_precision": "FLOAT",
                "explicit_dequantize": True, **OP_CONFIG_TAIL}

    def label(self, rule: Any) -> str:
        return f"{rule.weights.label()} weight-only"
