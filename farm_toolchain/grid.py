"""The source's own 4-bit grid, kept: a linear layer whose weights a GGUF file stored as affine 4-bit
blocks (Q4_0, Q4_1, Q4_K: 32 inputs per block, each `lo + s * k` with k in 0..15) is split into two
layers that compute the same thing and that LiteRT can hold exactly.

Why: LiteRT's int4 kernels take symmetric blocks (`s * q`, q in -8..7, no per-block offset), so
re-quantizing an affine block (min-max over its values) moves every weight (SmolLM2-135M's Q4_1
linears: relative weight error 0.10, held-out KL 0.49, while the same weights are exactly 16 levels
per block). Written as

    W = S + C ⊗ 1_32      S = s * (k - c)   (a symmetric int4 grid per block, c the shift)
                          C = lo + c * s    (one value per block: the block's offset)

`W x = S x + C · blocksum(x)`, where blocksum(x)_j is the sum of x's 32 inputs in block j. S is what
ai-edge-quantizer's dequantized-weight recovery (DWR) turns back into int4 blockwise-32 without
moving a value (it recovers each block's scale as the smallest gap between |values| and 0, and
refuses weights it cannot reproduce to 1e-4); C is a small layer (in/32 inputs), kept float or int8
by the recipe. The float export computes the same logits as the model up to float32 summation order.

Names: the split layer is `GridLinear` with children `grid_sym` (S) and `grid_offset` (C), so their
ops' scopes end `...Linear_grid_sym;` and `...Linear_grid_offset;`, which a recipe's rules match.

`split_weight` is numpy only (unit-tested without torch); `split_model` swaps the modules of a
loaded PyTorch model (the export, and the sensitivity sweep's PyTorch side, call the same one, so
the sweep's weights match the export's byte for byte)."""

from __future__ import annotations

import functools
from typing import Any

from farm_common.algorithms import GRID_OFFSET as OFFSET_NAME, GRID_SYM as SYM_NAME

assert (SYM_NAME, OFFSET_NAME) == ("grid_sym", "grid_offset")  # GridLinear's attribute names below
BLOCK = 32
LEVELS = 16  # 4-bit: k in 0..15
QMIN, QMAX = -8, 7  # ai-edge-quantizer's signed int4 range (not narrow below 8 bits)
# A value is on the grid when its level is an integer to within this fraction of a step.
LEVEL_TOLERANCE = 1e-3
# Why a linear is never split (not a fact about its weights).
TIED, HEAD = "reads the embedding's table (tied)", "the lm_head (the logits' op)"


def split_weight(w: Any) -> tuple[Any, Any] | str:
    """(S [out, in] float32, C [out, in/32] float32) with W = S + C repeated over each block, or
    why W is not on an affine 4-bit block-32 grid (a one-line reason)."""
    import numpy as np

    w = np.asarray(w)
    if w.ndim != 2:
        return f"rank {w.ndim}, not a matrix"
    out, inn = w.shape
    if inn % BLOCK:
        return f"{inn} inputs are not a multiple of {BLOCK}"
    blk = w.astype(np.float64).reshape(out * inn // BLOCK, BLOCK)
    lo = blk.min(1, keepdims=True)
    span = blk.max(1, keepdims=True) - lo
    steps = np.zeros_like(span)
    levels = np.zeros_like(blk)
    todo = np.ones(len(blk), dtype=bool)
    todo[span[:, 0] == 0] = False  # a constant block: all its levels 0, any step
    # The finest step first: a block that uses levels 0 and 15 (every Q4_1 block: its min and max)
    # has step span/15; a block using fewer levels (Q4_K's fitted ranges) may need span/n, n < 15.
    for n in range(LEVELS - 1, 0, -1):
        if not todo.any():
            break
        s = span[todo] / n
        k = (blk[todo] - lo[todo]) / s
        ok = np.all(np.abs(k - np.rint(k)) <= LEVEL_TOLERANCE, axis=1)
        idx = np.flatnonzero(todo)[ok]
        steps[idx] = s[ok]
        levels[idx] = np.rint(k[ok])
        todo[idx] = False
    if todo.any():
        first = int(np.flatnonzero(todo)[0])
        row, col = divmod(first, inn // BLOCK)
        distinct = len(np.unique(blk[first]))
        return (f"block {col} of row {row} holds {distinct} values not on a 4-bit grid "
                f"(an affine 4-bit block has at most {LEVELS} evenly spaced values)")
    shift = _shifts(levels.astype(np.int64))
    if isinstance(shift, str):
        return shift
    sym = steps * (levels - shift)
    off = lo + shift * steps
    recon = sym + off
    worst = float(np.max(np.abs(recon - blk) / np.where(steps > 0, steps, 1.0)))
    if worst > LEVEL_TOLERANCE:
        return f"the split does not reproduce the weights (off by {worst:.2g} of a step)"
    return (sym.reshape(out, inn).astype(np.float32),
            off.reshape(out, inn // BLOCK).astype(np.float32))


def _shifts(levels: Any) -> Any:
    """Per block, the shift c that puts its levels on int4's -8..7 such that dequantized-weight
    recovery finds the block's step: DWR takes the smallest gap between the sorted |values| and 0 as
    the scale, so every |k - c| must be a multiple of that gap. c = 8 always works for a block that
    uses levels 0 and 15 (|-8| and |7| differ by one step); other blocks try every allowed c."""
    import numpy as np

    kmax = levels.max(1)
    result = np.full((len(levels), 1), 8, dtype=np.int64)
    bad = ~_dwr_exact(levels, result)
    for c in range(-QMIN, -QMAX - 1, -1):  # 8 down to -7: k - c inside -8..7 needs kmax - 7 <= c <= 8
        if not bad.any():
            break
        cand = np.full((len(levels), 1), c, dtype=np.int64)
        fits = kmax - c <= QMAX
        ok = bad & fits & _dwr_exact(levels, cand)
        result[ok] = c
        bad &= ~ok
    if bad.any():
        return f"{int(bad.sum())} blocks have levels that dequantized-weight recovery cannot recover exactly"
    return result


def _dwr_exact(levels: Any, shift: Any) -> Any:
    """Per block: whether |k - shift| are all multiples of DWR's recovered step (the smallest gap
    between the distinct sorted |k - shift| and 0), and all inside int4's range."""
    import numpy as np

    q = levels - shift
    inside = (q.min(1) >= QMIN) & (q.max(1) <= QMAX)
    a = np.minimum(np.abs(q), -QMIN)  # outside the range is refused by `inside`
    present = np.zeros((len(a), -QMIN + 1), dtype=bool)  # |q| in 0..8
    np.put_along_axis(present, a, True, axis=1)
    present[:, 0] = True  # DWR appends 0
    values = np.arange(present.shape[1])
    # smallest gap between consecutive present values
    gap = np.full(len(a), np.iinfo(np.int64).max)
    last = np.zeros(len(a), dtype=np.int64)
    for v in values[1:]:
        here = present[:, v]
        gap = np.where(here, np.minimum(gap, v - last), gap)
        last = np.where(here, v, last)
    gap = np.where(gap == np.iinfo(np.int64).max, 1, gap)  # only 0 present: a constant block
    divisible = np.all(~present | (values[None, :] % gap[:, None] == 0), axis=1)
    return inside & divisible


def split_model(model: Any) -> dict[str, Any]:
    """Replace every bias-free nn.Linear on an affine 4-bit block-32 grid with a GridLinear. The
    lm_head is left alone: tied, it reads the embedding's table; untied, its op is the one that
    writes the logits, which recipes and the sweep's lm_head group name by `logits_output` (and a
    GGUF keeps it above 4 bits: Q6_K or Q8_0). Returns {"split": [module names], "kept": {module
    name: why}, "offset_params": int}."""
    import torch

    grid_linear = _module_class()
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = getattr(emb, "weight", None)
    split, kept, added = [], {}, 0
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if not isinstance(child, torch.nn.Linear) or isinstance(parent, grid_linear):
                continue
            if child.weight is tied:
                kept[name] = TIED
                continue
            if child is head:
                kept[name] = HEAD
                continue
            if child.bias is not None:
                kept[name] = "has a bias"
                continue
            parts = split_weight(child.weight.detach().cpu().numpy())
            if isinstance(parts, str):
                kept[name] = parts
                continue
            setattr(parent, child_name, grid_linear(torch.from_numpy(parts[0]), torch.from_numpy(parts[1])))
            split.append(name)
            added += parts[1].size
    return {"split": split, "kept": kept, "offset_params": int(added)}


@functools.cache
def _module_class() -> Any:
    import torch

    class GridLinear(torch.nn.Module):
        """y = grid_sym(x) + grid_offset(blocksum(x)): a linear layer on an affine 4-bit grid."""

        def __init__(self, sym: Any, offset: Any):
            super().__init__()
            # The attribute names are the scopes recipes match (farm_common.algorithms GRID_SYM, GRID_OFFSET).
            self.grid_sym = torch.nn.Linear(sym.shape[1], sym.shape[0], bias=False)
            self.grid_sym.weight.data.copy_(sym)
            self.grid_offset = torch.nn.Linear(offset.shape[1], offset.shape[0], bias=False)
            self.grid_offset.weight.data.copy_(offset)
            self.in_features, self.out_features = sym.shape[1], sym.shape[0]

        def forward(self, x: Any) -> Any:
            sums = x.unflatten(-1, (self.in_features // BLOCK, BLOCK)).sum(-1)
            return self.grid_sym(x) + self.grid_offset(sums)

    GridLinear.__module__ = __name__
    GridLinear.__qualname__ = "GridLinear"
    return GridLinear


def __getattr__(name: str) -> Any:
    # GridLinear needs torch; the module stays importable without it (unit tests, the orchestrator).
    if name == "GridLinear":
        return _module_class()
    raise AttributeError(name)
