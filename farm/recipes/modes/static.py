"""static: integer weights and integer activations whose ranges are calibrated on the recipe's
calibration set (int16 activations symmetric, int8 asymmetric: LiteRT's kernels)."""

from __future__ import annotations

from typing import Any

from farm.recipes.modes.registry import MODES, IntegerWeights


@MODES.register("static")
class Static(IntegerWeights):
    calibrated = True

    def check(self, rule: Any) -> None:
        if rule.activation_bits is None:
            raise ValueError(f"rule {rule.name!r}: a static rule needs activation_bits (8 or 16)")

    def activations(self, rule: Any) -> dict[str, Any]:
        # add_static_config: int16 activations symmetric, int8 asymmetric (LiteRT kernels).
        bits = rule.activation_bits
        return {"activation_tensor_config": {"num_bits": bits, "symmetric": bits == 16,
                                             "granularity": "TENSORWISE", "dtype": "INT"}}

    def label(self, rule: Any) -> str:
        return f"{rule.weights.label()} a{rule.activation_bits}"
