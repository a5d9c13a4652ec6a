"""static: integer weights and integer activations whose ranges are calibrated on the recipe's
calibration set (int16 activations symmetric, int8 asymmetric: LiteRT's kernels)."""

from __future__ import annotations

from typing import Any

from farm.recipes.modes.registry import MODES, OP_CONFIG_TAIL, Mode


@MODES.register("static")
class Static(Mode):
    calibrated = True

    def check(self, rule: Any) -> None:
        if rule.activation_bits is None:
            raise ValueError(f"rule {rule.name!r}: a static rule needs activation_bits (8 or 16)")

    def op_config(self, rule: Any) -> dict[str, Any]:
        bits = rule.activation_bits
        # add_static_config: int16 activations symmetric, int8 asymmetric (LiteRT kernels).
        return {"activation_tensor_config": {"num_bits": bits, "symmetric": bits == 16,
                                             "granularity": "TENSORWISE", "dtype": "INT"},
                "weight_tensor_config": rule.weights.render(), "compute_precision": "INTEGER",
                "explicit_dequantize": False, **OP_CONFIG_TAIL}

    def label(self, rule: Any) -> str:
        return f"{rule.weights.label()} a{rule.activation_bits}"
