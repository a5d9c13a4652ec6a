"""The source-grid split (farm_toolchain/grid.py), numpy only: a weight on an affine 4-bit block-32
grid comes apart into a symmetric int4 part that ai-edge-quantizer's dequantized-weight recovery
reads back without moving a value, plus per-block offsets, adding up to the weight exactly; a
weight off such a grid is refused with the reason (the negative controls)."""

from __future__ import annotations

import numpy as np
import pytest

from farm_toolchain.grid import BLOCK, split_weight
from farm_toolchain.make_model import q4_1


def _dwr(sym: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ai-edge-quantizer 0.10.0's recovery, blockwise (dequantized_weight_recovery.py): each
    block's scale is the smallest gap between its sorted |values| and 0; the integers are
    round(value / scale), clipped to int4."""
    blocks = np.abs(sym.reshape(-1, BLOCK)).astype(np.float64)
    with_zero = np.sort(np.hstack([blocks, np.zeros((len(blocks), 1))]), axis=1)
    gaps = np.diff(with_zero, axis=1)
    scale = np.min(np.where(gaps > 1e-9, gaps, np.inf), axis=1, keepdims=True)
    scale[~np.isfinite(scale)] = 1e-9
    q = np.clip(np.rint(sym.reshape(-1, BLOCK) / scale), -8, 7)
    return q, scale


def _recombined(sym: np.ndarray, off: np.ndarray) -> np.ndarray:
    out, inn = sym.shape
    return (sym.reshape(out, inn // BLOCK, BLOCK).astype(np.float64) + off[..., None]).reshape(out, inn)


def test_a_q4_1_weight_splits_into_a_recoverable_int4_part_and_offsets_that_add_up_exactly():
    w = q4_1(np.random.default_rng(0).standard_normal((48, 96)).astype(np.float32) * 0.05)
    sym, off = split_weight(w)
    assert sym.shape == w.shape and off.shape == (48, 96 // BLOCK)
    assert np.max(np.abs(_recombined(sym, off) - w)) < 1e-7
    q, scale = _dwr(sym)
    # What recovery writes reproduces the symmetric part to the last bit, inside int4.
    assert np.array_equal((q * scale).astype(np.float32).reshape(sym.shape), sym)
    assert q.min() == -8 and q.max() == 7  # Q4_1 blocks use levels 0 and 15: the full int4 range


def test_a_block_that_uses_few_levels_splits_with_a_shift_recovery_can_read():
    # Levels {0, 10, 13}: at the usual shift (8) recovery would take 2 steps as the scale (|2| and
    # |5| and 8) and round 5/2; another shift makes every |level| a multiple of the recovered step.
    k = np.tile(np.array([0, 10, 13] * 10 + [0, 10])[None, :], (4, 2)).astype(np.float64)
    w = (0.01 * k - 0.03).astype(np.float32)
    sym, off = split_weight(w)
    assert np.max(np.abs(_recombined(sym, off) - w)) < 1e-7
    q, scale = _dwr(sym)
    assert np.allclose((q * scale).reshape(sym.shape), sym, atol=1e-9)


@pytest.mark.parametrize("make, why", [
    (lambda rng: rng.standard_normal((8, 64)).astype(np.float32), "not on a 4-bit grid"),
    # 17 evenly spaced levels: one more than 4 bits hold
    (lambda rng: np.tile(np.concatenate([np.arange(17), np.arange(15)]).astype(np.float32)[None, :] * 0.01, (4, 2)),
     "holds 17 values"),
    (lambda rng: q4_1(rng.standard_normal((4, 64)).astype(np.float32))[:, :48], "not a multiple of 32"),
    (lambda rng: np.zeros((2, 3, 32), dtype=np.float32), "not a matrix"),
])
def test_a_weight_off_an_affine_4_bit_block_grid_is_refused_with_the_reason(make, why):
    out = split_weight(make(np.random.default_rng(1)))
    assert isinstance(out, str) and why in out


def test_one_block_off_the_grid_refuses_the_whole_weight_and_names_it():
    w = q4_1(np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    w[2, 40] += 0.003  # row 2, block 1: between two levels
    out = split_weight(w)
    assert isinstance(out, str) and "block 1 of row 2" in out
