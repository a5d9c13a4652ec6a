"""farm_toolchain/tflite_run.py without a model: the causal mask the decoder loop feeds (the loop
itself runs on real graphs in the logits_parity and CPU-class integration tests)."""

from __future__ import annotations

import numpy as np

from farm_toolchain import tflite_run as tr


def test_mask_is_causal_over_the_cache():
    mask = tr.mask(np, [2, 3], 5, np.float32)
    assert mask.shape == (1, 1, 2, 5) and mask.dtype == np.float32
    assert (mask[0, 0, 0] == np.array([0, 0, 0, tr.MASK_MIN, tr.MASK_MIN], dtype=np.float32)).all()
    assert (mask[0, 0, 1, :4] == 0).all() and mask[0, 0, 1, 4] == np.float32(tr.MASK_MIN)
