"""dynamic: integer weights, float activations quantized at run time (compute precision INTEGER)."""

from __future__ import annotations

from farm.recipes.modes.registry import MODES, IntegerWeights


@MODES.register("dynamic")
class Dynamic(IntegerWeights):
    suffix = "dynamic"
