"""fp16: weights cast to float16 and widened back by a DEQUANTIZE op before a float op (the
quantizer's `float_casting`; compute precision FLOAT). Measured with ai-edge-quantizer 0.10.0 on
SmolLM2-135M: it writes each linear's float16 copy once per signature (the prefill and decode ops
stop sharing their buffer: "overriding other previously quantized data"), so the file barely
shrinks (540.6 MB float -> 498.4 MB); the sensitivity sweep measures its real bytes per group."""

from __future__ import annotations

from typing import Any

from farm.recipes.modes.registry import MODES, OP_CONFIG_TAIL, Mode

ALGORITHM = "float_casting"


@MODES.register("fp16")
class Fp16(Mode):
    def check(self, rule: Any) -> None:
        super().check(rule)
        if rule.algorithm not in ("min_max_uniform_quantize", ALGORITHM):
            raise ValueError(f"rule {rule.name!r}: an fp16 rule is the quantizer's {ALGORITHM}; it takes no other algorithm")
        if rule.weights.bits != 8 or rule.weights.granularity != "channelwise":
            raise ValueError(f"rule {rule.name!r}: an fp16 rule takes no weights settings (its weights are float16)")

    def algorithm_key(self, rule: Any) -> str:
        return ALGORITHM

    def op_config(self, rule: Any) -> dict[str, Any]:
        # As the quantizer writes a float_casting entry back (weight_tensor_config dtype FLOAT, 16 bits).
        return {"weight_tensor_config": {"num_bits": 16, "symmetric": True, "granularity": "CHANNELWISE",
                                         "dtype": "FLOAT"},
                "compute_precision": "FLOAT", "explicit_dequantize": True, **OP_CONFIG_TAIL}

    def expected_bits(self, rule: Any) -> int | None:
        return 16

    def label(self, rule: Any) -> str:
        return "float16"
