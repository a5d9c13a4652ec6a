"""weight_only: integer weights dequantized before a float op (compute precision FLOAT, an explicit
DEQUANTIZE op in front of the op, which the read-back finds)."""

from __future__ import annotations

from farm.recipes.modes.registry import MODES, IntegerWeights


@MODES.register("weight_only")
class WeightOnly(IntegerWeights):
    compute_precision = "FLOAT"
    explicit_dequantize = True
    suffix = "weight-only"
