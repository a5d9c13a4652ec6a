"""prompt_lengths' pure parts (farm_toolchain/gates/prompt_lengths.py): which prompt lengths are run,
how a length is named, and the verdict on one first token compared by its text."""

from __future__ import annotations

import pytest

from farm_toolchain.gates.prompt_lengths import (
    REPLACEMENT,
    _judge,
    boundary,
    plan_lengths,
    gate_status,
)


def crossings(prefills: list[int], limit: int) -> set[int]:
    """Every kN-1, kN, kN+1 within [1, limit], written out independently of plan_lengths."""
    out = set()
    for n in prefills:
        for k in range(1, limit // n + 2):
            out |= {x for x in (k * n - 1, k * n, k * n + 1) if 1 <= x <= limit}
    return out


# --- plan_lengths ----------------------------------------------------------------------------------


@pytest.mark.parametrize("prefills, limit", [([8], 63), ([8, 32], 127), ([5], 41), ([16], 16)])
def test_every_boundary_up_to_the_limit_is_planned(prefills, limit):
    got = plan_lengths(prefills, limit, max_cases=1000)
    assert got == sorted(crossings(prefills, limit) | {1, 2, limit})
    assert got == sorted(set(got)) and max(got) == limit


def test_the_limit_is_included_and_nothing_beyond_it():
    got = plan_lengths([8], 63, 48)
    assert got[:5] == [1, 2, 7, 8, 9] and got[-4:] == [55, 56, 57, 63]
    assert 64 not in got and 65 not in got  # 8×8 and 8×8+1 are past the limit
    assert plan_lengths([8], 64, 48)[-2:] == [63, 64]  # the control: one more token of room


def test_no_room_plans_nothing():
    assert plan_lengths([8], 0, 48) == []
    assert plan_lengths([8], -5, 48) == []


def test_a_limit_of_one_plans_only_length_one():
    assert plan_lengths([8], 1, 48) == [1]


def test_thinning_keeps_1_2_the_limit_and_the_first_two_multiples():
    full = plan_lengths([4], 127, 1000)
    assert len(full) > 10
    got = plan_lengths([4], 127, 10)
    assert len(got) == 10
    assert {1, 2, 127, 3, 4, 5, 7, 8, 9} <= set(got)
    assert set(got) <= set(full) and got == sorted(got)


def test_thinning_spreads_the_rest_evenly():
    full = plan_lengths([4], 255, 1000)
    got = plan_lengths([4], 255, 20)
    kept = {1, 2, 255, 3, 4, 5, 7, 8, 9}
    rest = [x for x in got if x not in kept]
    assert len(got) == 20 and len(rest) == 11
    assert set(rest) <= set(full)
    # Spread over the whole range, not the first eleven after the kept ones.
    assert rest[0] == 11 and rest[-1] > 200


def test_the_kept_lengths_win_over_max_cases():
    # Four signatures: 1, 2, the limit and 6 per signature are always kept, more than max_cases.
    got = plan_lengths([4, 8, 16, 32], 127, 5)
    assert {1, 2, 127, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65} <= set(got)
    assert len(got) == 18


# --- boundary --------------------------------------------------------------------------------------


@pytest.mark.parametrize("length, prefills, name", [
    (8, [8], "1×8"),
    (7, [8], "1×8-1"),
    (17, [8], "2×8+1"),
    (63, [8], "8×8-1"),
    (33, [8, 32], "1×32+1"),  # the largest signature it reaches
    (16, [8, 32], "2×8"),  # 32 is not reached: the smaller one names it
    (12, [8], "between boundaries"),
    (1, [8], "between boundaries"),
])
def test_boundary(length, prefills, name):
    assert boundary(length, prefills) == name


# --- _judge ----------------------------------------------------------------------------------------

STOPS = {2}
STOP_STRINGS = ["<|im_end|>", "]<|im_end|>\n"]


def test_same_text_is_a_match():
    assert _judge(" Paris", 11, " Paris", STOPS, STOP_STRINGS) == ("match", "same text")


def test_same_partial_utf8_text_is_an_ambiguous_match():
    verdict, detail = _judge(REPLACEMENT, 11, REPLACEMENT, STOPS, STOP_STRINGS)
    assert verdict == "match" and "ambiguous" in detail


def test_empty_text_where_pytorch_picks_a_stop_token_is_a_match():
    verdict, detail = _judge("", 2, "<|im_end|>", STOPS, STOP_STRINGS)
    assert verdict == "match" and "stop token" in detail
    # The control: the same empty text where PyTorch's top-1 is an ordinary token.
    assert _judge("", 11, " Paris", STOPS, STOP_STRINGS)[0] == "mismatch"


def test_empty_text_where_pytorch_begins_a_stop_string_is_withheld():
    assert _judge("", 40, "]", STOPS, STOP_STRINGS) == ("withheld", "")
    assert _judge("", 41, "<|im", STOPS, STOP_STRINGS) == ("withheld", "")
    # The whole stop string is not a prefix of one: not withheld.
    assert _judge("", 42, "<|im_end|>", STOPS, STOP_STRINGS)[0] == "mismatch"
    # Withholding explains an empty text only: a non-empty other text is a mismatch.
    assert _judge("x", 40, "]", STOPS, STOP_STRINGS)[0] == "mismatch"


def test_different_text_is_a_mismatch_naming_both():
    verdict, detail = _judge(" Lyon", 11, " Paris", STOPS, STOP_STRINGS)
    assert verdict == "mismatch"
    assert detail == "runtime ' Lyon' vs PyTorch top-1 ' Paris' (id 11)"


def test_both_empty_is_not_a_match():
    assert _judge("", 11, "", STOPS, STOP_STRINGS)[0] == "mismatch"


# --- gate_status ---------------------------------------------------------------------------------------

DRIFT = "a near-float Gemma 3 bundle scores 2-11 nats off at lengths 2, 63, 97 and 224 (2026-12-04)"


def _case(length, v="match", diff=0.1):
    return {"length": length, "verdict": v, "logprob_diff": diff}


def test_scores_within_the_limit_and_every_token_agreeing_pass():
    assert gate_status([_case(2), _case(31, "near_tie")], 1.0, None)[0] == "pass"


def test_a_score_over_the_limit_fails_unless_the_models_scoring_drift_is_declared():
    cases = [_case(2, diff=10.8), _case(31)]
    status, findings = gate_status(cases, 1.0, None)
    assert status == "fail" and "at 1 of 2 scored lengths (2; max 10.80)" in findings[0]
    status, findings = gate_status(cases, 1.0, DRIFT)
    assert status == "warn" and DRIFT in findings[0]


def test_a_declared_drift_never_excuses_a_first_token_that_differs_or_nothing_scored():
    assert gate_status([_case(2, diff=10.8), _case(31, "mismatch")], 1.0, DRIFT)[0] == "fail"
    assert gate_status([_case(2, "error")], 1.0, DRIFT)[0] == "fail"
    assert gate_status([{"length": 2, "verdict": "match"}], 1.0, DRIFT)[0] == "fail"  # no score at all


def test_empty_text_where_pytorch_picks_nul_waits_for_the_score():
    # litert-lm's text ends at a NUL: the verdict is the runtime's score's to give (measure()).
    verdict, detail = _judge("", 193, "\x00", STOPS, STOP_STRINGS)
    assert verdict == "by_score" and "NUL (id 193)" in detail
    # The control: a non-empty runtime text where PyTorch's top-1 is NUL is a plain mismatch.
    assert _judge("x", 193, "\x00", STOPS, STOP_STRINGS)[0] == "mismatch"


def test_a_nul_whose_text_was_lost_warns_and_names_the_runtime():
    lost = {**_case(48), "nul_text_lost": True}
    status, findings = gate_status([_case(2), lost], 1.0, None)
    assert status == "warn" and "litert-lm returns no text for a NUL token" in findings[-1] and "(48)" in findings[-1]
    # Negative control: the same length unconfirmed by the score is a mismatch, and fails.
    assert gate_status([_case(2), _case(48, "mismatch")], 1.0, None)[0] == "fail"


def test_an_unconfirmable_length_at_the_cache_end_warns_and_a_mismatch_still_fails():
    status, findings = gate_status([_case(2), _case(63, "unconfirmed")], 1.0, None)
    assert status == "warn" and "could not be confirmed" in findings[-1] and "(63)" in findings[-1]
    assert gate_status([_case(2), _case(63, "unconfirmed"), _case(48, "mismatch")], 1.0, None)[0] == "fail"
