"""Treatments: what a recipe search may do to one op group, by name (`int4_b32`, `int8`,
`int4_b64_octav`, `int8_wo`, `fp16`, `float`), and the recipe rule that does it.

    float                 keep the group float32 (no_quantize)
    fp16                  float16 weights (the quantizer's float_casting; weight-only)
    int{2,4,8}[_c|_b32|_b64|_b128][_wo|_a8|_a16][_ALGO]
                          integer weights, channelwise (default) or blockwise, dynamic-range
                          activations (int8 at run time) unless `_wo` (weight-only: dequantized
                          before a float op) or `_a16` / `_a8` (static: integer activations,
                          calibrated on the static recipe's calibration set); ALGO one of the
                          quantizer's weight algorithms (octav, mse, dwr =
                          dequantized_weight_recovery, hr = decomposed Hadamard rotation), min-max
                          by default

A treatment renders through the same Rule and mode modules as a recipe written by hand, so what
the sweep measures is exactly what a recipe built from it asks the quantizer for."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from farm.digest import digest
from farm.errors import BadInput
from farm.recipes.base import Rule, Weights
from farm_common.algorithms import ROTATIONS

ALGORITHMS = {"octav": "OCTAV", "mse": "MSE", "dwr": "dequantized_weight_recovery", "hr": "DECOMPOSED_HADAMARD_ROTATION"}
# What `farm tune` tries per group unless told otherwise, smallest last. The published figures
# (docs/recipes.md) put int8 near the float model and int4 blockwise-32 where the recipe decides.
DEFAULT_TUNE = ("int8", "int4_b128", "int4_b64", "int4_b32")
_GRAMMAR = re.compile(r"^int(?P<bits>[248])(?:_(?P<g>c|b32|b64|b128))?(?:(?P<wo>_wo)|_a(?P<act>8|16))?(?:_(?P<algo>[a-z]+))?$")


class Treatment(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    mode: str  # a rule mode: float | fp16 | dynamic | weight_only
    bits: int | None = None  # weight bits (None: float32; 16: float16)
    granularity: str = "channelwise"
    algorithm: str = "min_max_uniform_quantize"
    activation_bits: int | None = None  # static: integer activations, calibrated

    @property
    def calibrated(self) -> bool:
        return self.mode == "static"

    @property
    def rotated(self) -> bool:
        return self.algorithm in ROTATIONS

    def rule(self, name: str, regex: str, op: str, reason: str = "", layers: list[str] | None = None) -> Rule:
        weights = Weights(bits=self.bits, granularity=self.granularity) if self.bits in (2, 4, 8) else Weights()
        return Rule(name=name, regex=regex, op=op, mode=self.mode, algorithm=self.algorithm, weights=weights,
                    activation_bits=self.activation_bits, reason=reason, layers=layers or [])

    def entry(self) -> dict[str, Any]:
        """What the toolchain's sensitivity sweep applies to every group: the rendered rule's
        algorithm and op_config."""
        r = self.rule("t", ".*", "FULLY_CONNECTED")
        return {"name": self.name, "algorithm_key": r.algorithm_key, "op_config": r.op_config()}

    def digest(self) -> str:
        e = self.entry()
        return digest({"algorithm_key": e["algorithm_key"], "op_config": e["op_config"]})

    @property
    def weight_bits(self) -> float:
        """Bits per weight before scales (float 32, fp16 16)."""
        return float(self.bits if self.bits is not None else 32)


def parse_treatment(name: str) -> Treatment:
    """A treatment by name; BadInput naming the grammar otherwise."""
    text = name.strip().lower()
    if text == "float":
        return Treatment(name="float", mode="float")
    if text == "fp16":
        return Treatment(name="fp16", mode="fp16", bits=16)
    m = _GRAMMAR.match(text)
    if m is None:
        raise BadInput(f"unknown treatment {name!r}: use float, fp16 or int{{2,4,8}}[_c|_b32|_b64|_b128][_wo|_a16][_ALGO] "
                       f"(e.g. int4_b32, int8, int4_b64_octav; ALGO one of {', '.join(sorted(ALGORITHMS))})")
    algo = m.group("algo")
    if algo is not None and algo not in ALGORITHMS:
        raise BadInput(f"treatment {name!r}: unknown algorithm {algo!r}; one of {', '.join(sorted(ALGORITHMS))}")
    if ALGORITHMS.get(algo or "") in ROTATIONS and (m.group("wo") or m.group("act")):
        # ai-edge-quantizer 0.10.0's hadamard_rotation materializes the weight with QUANTIZE_TENSOR
        # only (no DEQUANTIZE in front, no activation ranges): the op always reads integer weights
        # at run time, i.e. dynamic range.
        raise BadInput(f"treatment {name!r}: a Hadamard rotation ({algo}) is dynamic-range only in this quantizer; "
                       f"drop _wo/_a{m.group('act') or ''} (e.g. int{m.group('bits')}_{algo})")
    g = m.group("g") or "c"
    granularity = "channelwise" if g == "c" else f"blockwise_{g[1:]}"
    act = int(m.group("act")) if m.group("act") else None
    mode = "weight_only" if m.group("wo") else "static" if act else "dynamic"
    return Treatment(name=text, mode=mode, bits=int(m.group("bits")), granularity=granularity, activation_bits=act,
                     algorithm=ALGORITHMS.get(algo or "", "min_max_uniform_quantize"))


def parse_treatments(names: list[str] | tuple[str, ...]) -> list[Treatment]:
    out, seen = [], set()
    for n in names:
        t = parse_treatment(n)
        if t.name not in seen:
            seen.add(t.name)
            out.append(t)
    return out
