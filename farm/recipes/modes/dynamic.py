"""dynamic: integer weights, float activations quantized at run time (compute precision INTEGER)."""

from __future__ import annotations

from typing import Any

from farm.recipes.modes.registry import MODES, OP_CONFIG_TAIL, Mode


@MODES.register("dynamic")
class Dynamic(Mode):
    def op_config(self, rule: Any) -> dict[str, Any]:
        return {"weight_tensor_config": rule.weights.render(), "compute_precision": "INTEGER",
                "explicit_dequantize": False, **OP_CONFIG_TAIL}

    def label(self, rule: Any) -> str:
        return f"{rule.weights.label()} dynamic"
