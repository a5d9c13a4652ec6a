"""What a recipe rule does to the ops it matches: its mode, one module per mode.

    @MODES.register("weight_only")
    class WeightOnly(Mode): ...

A mode renders the rule's `op_config` exactly as the installed ai-edge-quantizer writes it
(RecipeManager.add_dynamic_config / add_weight_only_config / add_static_config, then
get_quantization_recipe, key for key: the toolchain's quantize command refuses a recipe the
quantizer does not re-emit unchanged, so a drift shows), says what the read-back must find, and
checks the rule's own consistency. A rule names its mode (`mode: dynamic`); adding a treatment the
quantizer offers is one new module."""

from __future__ import annotations

from typing import Any

from farm.errors import BadInput
from farm_common.algorithms import ROTATED_BLOCKWISE_TABLE, ROTATIONS
from farm_common.registry import Registry

DEFAULT_ALGORITHM = "min_max_uniform_quantize"
# Measured 2026-12-04: ai-edge-quantizer 0.10.0 crashes on a rotated blockwise EMBEDDING_LOOKUP
# table (its transformations/quantize_tensor.py appends b"_scales" to the str name of the tensor the
# rotation made: "TypeError: can only concatenate str (not "bytes") to str"); a rotated blockwise
# FULLY_CONNECTED quantizes. The pair is bad input up front (farm_common.algorithms).
# The tail every op_config ends with, as the quantizer writes it.
OP_CONFIG_TAIL: dict[str, Any] = {"skip_checks": False, "min_weight_elements": 0}


class Mode:
    name: str = ""
    quantizes = True  # a recipe of rules that all keep ops float quantizes nothing
    calibrated = False  # static activations: the recipe needs a calibration set

    def check(self, rule: Any) -> None:
        """ValueError naming the rule when it is not consistent with this mode."""
        if rule.activation_bits is not None:
            raise ValueError(f"rule {rule.name!r}: activation_bits is for static rules only (mode is {self.name})")
        if (rule.algorithm in ROTATIONS and rule.weights.granularity != "channelwise"
                and rule.op in ("EMBEDDING_LOOKUP", "*")):
            raise ValueError(f"rule {rule.name!r}: {ROTATED_BLOCKWISE_TABLE}")

    def algorithm_key(self, rule: Any) -> str:
        return rule.algorithm

    def op_config(self, rule: Any) -> dict[str, Any]:
        raise NotImplementedError

    def expected_bits(self, rule: Any) -> int | None:
        """The weight bit width the read-back must find on the rule's ops (None: float)."""
        return rule.weights.bits

    def label(self, rule: Any) -> str:
        raise NotImplementedError


class IntegerWeights(Mode):
    """A mode whose weights are integers at the rule's bit width: the op_config's weight tensor
    config, compute precision and whether a DEQUANTIZE op feeds the float op."""

    compute_precision = "INTEGER"
    explicit_dequantize = False
    suffix = ""  # the label after the weights' ("int4 b32 dynamic")

    def op_config(self, rule: Any) -> dict[str, Any]:
        return {**self.activations(rule), "weight_tensor_config": rule.weights.render(),
                "compute_precision": self.compute_precision, "explicit_dequantize": self.explicit_dequantize,
                **OP_CONFIG_TAIL}

    def activations(self, rule: Any) -> dict[str, Any]:
        return {}

    def label(self, rule: Any) -> str:
        # The algorithm when it is not min-max: a rotation or a recovery is what the rule does.
        algo = "" if rule.algorithm.lower() == DEFAULT_ALGORITHM.lower() else f" ({rule.algorithm})"
        return f"{rule.weights.label()} {self.suffix}{algo}"


def _make(name: str, cls: type[Mode], attrs: dict[str, Any]) -> Mode:
    mode = cls(**attrs)
    mode.name = name
    return mode


MODES: Registry[Mode] = Registry("rule mode", "farm.recipes.modes", make=_make, support=("registry",), error=BadInput)
