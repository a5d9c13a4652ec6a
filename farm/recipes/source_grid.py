"""Recipes over a source-grid export (farm_toolchain/grid.py: each linear layer on an affine 4-bit
block grid split into `grid_sym`, a symmetric int4 grid, and `grid_offset`, one value per block).

What every such recipe ends with, hand-written (recipes/source_grid_wi4_b32.yaml) or written by
`farm tune --source-grid`: the offsets rule. The offsets are a small layer (in/32 inputs) that no
group treatment fits (blockwise-32 does not divide 18 inputs); it keeps them
near float, whatever treatment the split layer's group has: float16, computed in float (SmolLM2,
through the Interpreter: KL 0.0190 at fp16, 0.0225 with int8 offsets and int8 block sums, 0.0182
at float32; the fp16 and int8 files are the same size)."""

from __future__ import annotations

from farm.recipes.base import Rule
from farm_common.algorithms import GRID_OFFSET_REGEX

OFFSETS_RULE = "grid_offsets"


def offsets_rule() -> Rule:
    return Rule(name=OFFSETS_RULE, regex=GRID_OFFSET_REGEX, op="FULLY_CONNECTED", mode="fp16",
                reason="one offset per block of 32 inputs of a split layer; float16, computed in float")
