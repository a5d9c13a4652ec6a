"""float: the matched ops keep float weights (the quantizer's `no_quantize`): a float exception."""

from __future__ import annotations

from typing import Any

from farm.recipes.modes.registry import DEFAULT_ALGORITHM, MODES, OP_CONFIG_TAIL, Mode


@MODES.register("float")
class Float(Mode):
    quantizes = False

    def check(self, rule: Any) -> None:
        super().check(rule)
        if rule.algorithm not in (DEFAULT_ALGORITHM, "no_quantize"):
            raise ValueError(f"rule {rule.name!r}: a float rule takes no algorithm (it is no_quantize)")

    def algorithm_key(self, rule: Any) -> str:
        return "no_quantize"

    def op_config(self, rule: Any) -> dict[str, Any]:
        # What the quantizer itself writes for a no_quantize entry when it re-emits a loaded recipe.
        return {"compute_precision": "FLOAT", "explicit_dequantize": False, **OP_CONFIG_TAIL}

    def expected_bits(self, rule: Any) -> int | None:
        return None

    def label(self, rule: Any) -> str:
        return "float32"
