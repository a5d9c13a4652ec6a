"""logits_parity's pure parts (farm_toolchain/gates/logits_parity.py): the metrics over two logit
arrays, the pass rule against the thresholds of farm_common/gates/, and the teacher-forcing
token sequence. numpy only (the orchestrator venv has it through matplotlib)."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from farm_common.gates.logits_parity import LogitsParity, LogitsParityFloat
from farm_toolchain.gates import logits_parity as lp
from farm_toolchain.protocol import BadInput

RNG = np.random.default_rng(0)
PT = RNG.standard_normal((40, 64)) * 3


# --- compare_logits --------------------------------------------------------------------------------


def test_identical_logits():
    m = lp.compare_logits(PT, PT.copy())
    assert (m["positions"], m["vocab"]) == (40, 64)
    assert m["top1"] == 1.0 and m["top5"] == 1.0 and m["top5_overlap"] == 1.0
    assert m["pearson"] == pytest.approx(1.0, abs=1e-12)
    assert m["kl"] == pytest.approx(0.0, abs=1e-12) and m["kl_ratio"] == pytest.approx(0.0, abs=1e-12)
    assert m["max_abs_diff"] == 0.0 and m["mean_abs_diff"] == 0.0
    assert m["pt_logit_absmax"] == pytest.approx(np.abs(PT).max())
    assert m["kl_uniform"] > 0


def test_other_logits_score_low():
    other = np.random.default_rng(1).standard_normal(PT.shape) * 3
    m = lp.compare_logits(PT, other)
    assert m["top1"] < 0.2 and m["top5"] < 0.4
    assert abs(m["pearson"]) < 0.1
    assert m["kl"] > 1.0 and m["kl_ratio"] > 0.5


def test_shuffled_vocabulary_scores_low():
    shuffled = PT[:, np.random.default_rng(2).permutation(PT.shape[1])]
    m = lp.compare_logits(PT, shuffled)
    assert m["top1"] < 0.2 and abs(m["pearson"]) < 0.2


def test_a_constant_shift_keeps_the_distribution_but_not_the_logits():
    m = lp.compare_logits(PT, PT + 2.0)
    assert m["top1"] == 1.0 and m["pearson"] == pytest.approx(1.0)
    assert m["kl"] == pytest.approx(0.0, abs=1e-12)
    assert m["max_abs_diff"] == pytest.approx(2.0) and m["mean_abs_diff"] == pytest.approx(2.0)


def test_a_scaled_copy_keeps_the_order_but_moves_the_distribution():
    m = lp.compare_logits(PT, PT * 2.0)
    assert m["top1"] == 1.0 and m["pearson"] == pytest.approx(1.0)
    assert m["kl"] > 0.01


def test_one_flipped_position():
    lt = PT.copy()
    top = PT[0].argmax()
    lt[0, top] = PT[0].min() - 1  # position 0's top-1 falls to the bottom of the converted model
    m = lp.compare_logits(PT, lt)
    assert m["top1"] == pytest.approx(39 / 40) and m["top5"] == pytest.approx(39 / 40)


def test_a_vocabulary_smaller_than_five():
    pt = np.array([[1.0, 0.0, -1.0], [0.0, 2.0, 1.0]])
    m = lp.compare_logits(pt, pt)
    assert m["vocab"] == 3 and m["top5"] == 1.0 and m["top5_overlap"] == 1.0


def test_flat_logits_leave_pearson_and_kl_ratio_undefined():
    flat = np.zeros((3, 10))
    m = lp.compare_logits(flat, flat)
    assert math.isnan(m["pearson"]) and math.isnan(m["kl_ratio"])  # nothing to correlate, kl_uniform 0
    assert m["kl"] == 0.0


# --- _judge ----------------------------------------------------------------------------------------

FLOAT = LogitsParityFloat().thresholds()


def test_identical_logits_pass_the_float_thresholds():
    assert lp._judge(lp.compare_logits(PT, PT), FLOAT, "interpreter") == ("pass", [])


def test_other_logits_fail_the_float_thresholds_naming_each_metric():
    other = np.random.default_rng(1).standard_normal(PT.shape) * 3
    status, failures = lp._judge(lp.compare_logits(PT, other), FLOAT, "interpreter")
    assert status == "fail"
    named = {f.split()[0] for f in failures}
    assert named == {"top1", "top5", "pearson", "kl", "kl_ratio", "max_abs_diff"}


def test_a_failing_metric_is_named_with_its_threshold():
    status, failures = lp._judge({"top1": 0.5}, {"top1_min": 0.97}, "interpreter")
    assert (status, failures) == ("fail", ["top1 0.5 is below top1_min 0.97"])
    status, failures = lp._judge({"kl": 0.2}, {"kl_max": 0.05}, "interpreter")
    assert (status, failures) == ("fail", ["kl 0.2 is above kl_max 0.05"])
    # The controls: on the right side of the limit, and at it.
    assert lp._judge({"top1": 0.97}, {"top1_min": 0.97}, "interpreter") == ("pass", [])
    assert lp._judge({"kl": 0.05}, {"kl_max": 0.05}, "interpreter") == ("pass", [])


def test_a_none_threshold_is_off():
    assert lp._judge({"top1": 0.0}, {"top1_min": None}, "interpreter") == ("pass", [])
    assert lp._judge({"top1": 0.0}, {"top1_min": 0.5}, "interpreter")[0] == "fail"


def test_thresholds_of_the_other_mode_are_not_applied():
    metrics = {"top1": 0.0, "scores_pearson": 0.0}
    assert lp._judge(metrics, {"top1_min": 0.9}, "runtime_scores") == ("pass", [])
    assert lp._judge(metrics, {"scores_pearson_min": 0.9}, "interpreter") == ("pass", [])
    status, failures = lp._judge(metrics, {"scores_pearson_min": 0.9}, "runtime_scores")
    assert status == "fail" and failures == ["scores_pearson 0 is below scores_pearson_min 0.9"]


def test_a_metric_that_could_not_be_computed_fails():
    for metrics in ({"pearson": float("nan")}, {}, {"pearson": None}):
        status, failures = lp._judge(metrics, {"pearson_min": 0.99}, "interpreter")
        assert status == "fail" and failures == ["pearson could not be computed (threshold pearson_min = 0.99)"]


def test_every_threshold_of_both_models_has_a_check():
    for model in (LogitsParityFloat, LogitsParity):
        assert set(model().thresholds()) == set(lp.CHECKS)
    assert lp.SETTINGS == {"float": LogitsParityFloat, "quantized": LogitsParity}


# --- token_sequence --------------------------------------------------------------------------------


class FakeTokenizer:
    """The interface token_sequence uses: tokenizer(text, add_special_tokens=...)["input_ids"] and
    all_special_ids."""

    def __init__(self, ids: list[int], special: list[int] | None = None):
        self.ids = ids
        self.calls: list[tuple[str, bool]] = []
        if special is not None:
            self.all_special_ids = special

    def __call__(self, text: str, add_special_tokens: bool = True):
        self.calls.append((text, add_special_tokens))
        return {"input_ids": list(self.ids)}


def test_token_sequence_drops_special_and_pad_ids_and_repeats_to_length():
    tok = FakeTokenizer([1, 5, 6, 0, 7, 9], special=[1, 9])
    config = types.SimpleNamespace(pad_token_id=0)
    assert lp.token_sequence(tok, config, "some text", 8) == [5, 6, 7, 5, 6, 7, 5, 6]
    assert tok.calls == [("some text", False)]


def test_token_sequence_keeps_ids_when_there_is_no_pad_or_special_ids():
    tok = FakeTokenizer([0, 3])  # no all_special_ids attribute
    assert lp.token_sequence(tok, types.SimpleNamespace(pad_token_id=None), "t", 3) == [0, 3, 0]
    assert lp.token_sequence(tok, object(), "t", 2) == [0, 3]


def test_token_sequence_refuses_text_without_usable_ids():
    tok = FakeTokenizer([1, 0, 1], special=[1])
    with pytest.raises(BadInput, match="tokenizes to no usable ids"):
        lp.token_sequence(tok, types.SimpleNamespace(pad_token_id=0), "t", 4)
    # The control: the same ids with another pad id leave 0 usable.
    assert lp.token_sequence(tok, types.SimpleNamespace(pad_token_id=5), "t", 2) == [0, 0]

