"""task_accuracy's question set and pass rules (farm_toolchain/gates/task_accuracy.py): the rules
with their negative controls on crafted answers (the real runs are in the integration tests)."""

from __future__ import annotations

import re

import pytest

from farm_common.gates.task_accuracy import TaskAccuracy
from farm_toolchain.gates.task_accuracy import judge, question_set
from farm_toolchain.protocol import BadInput


def test_the_shipped_set_has_at_least_fifty_checkable_questions_in_both_forms():
    qs = question_set("everyday")
    assert len(qs) >= 50 and len({q["id"] for q in qs}) == len(qs)
    for q in qs:
        assert q["chat"].strip() and q["completion"].strip(), q["id"]
        re.compile(q["expect"])
    with pytest.raises(BadInput, match="unknown question set"):
        question_set("gsm8k")


@pytest.mark.parametrize("qid, right, wrong", [
    ("sum-10-10", "10 + 10 = 20.", "10 + 10 = 200"),
    ("sum-1-1", "1 + 1 = 2.", "1 + 1 = 1.2"),
    ("freezing", "It freezes at 0 degrees.", "at -10 degrees"),
    ("capital-france", "The capital of France is Paris.", "The capital of France is Lyon."),
    ("opposite-big", "small", "large"),
])
def test_answer_patterns_take_the_answer_and_refuse_near_misses(qid, right, wrong):
    q = next(q for q in question_set("everyday") if q["id"] == qid)
    assert re.search(q["expect"], right, re.IGNORECASE) and not re.search(q["expect"], wrong, re.IGNORECASE)


def _case(qid: str, float_right: bool, bundle_right: bool, loops: bool = False) -> dict:
    deg = {"degenerate": False, "reason": None}
    return {"id": qid, "prompt": qid, "litert": {"right": bundle_right, "degeneration": deg},
            "pytorch": {"right": float_right, "degeneration": deg},
            "loops_where_reference_ends": loops, "answer_lost": float_right and not bundle_right}


def _cases(kept: int, lost: int, gained: int = 0, both_wrong: int = 5) -> list[dict]:
    return ([_case(f"k{i}", True, True) for i in range(kept)] + [_case(f"l{i}", True, False) for i in range(lost)]
            + [_case(f"g{i}", False, True) for i in range(gained)] + [_case(f"w{i}", False, False) for i in range(both_wrong)])


def test_a_file_that_keeps_every_answer_passes():
    status, m, _f, extra = judge(_cases(kept=20, lost=0, gained=1), TaskAccuracy())
    assert status == "pass" and m["float_right"] == 20 and m["kept"] == 20 and m["gained"] == 1 and extra["lost_ids"] == []


def test_losing_more_than_allowed_fails_and_names_the_questions():
    status, m, findings, extra = judge(_cases(kept=17, lost=3), TaskAccuracy(max_lost=2))
    assert status == "fail" and m["lost"] == 3 and extra["lost_ids"] == ["l0", "l1", "l2"]
    assert any("more than the 2 allowed" in f for f in findings)
    assert judge(_cases(kept=17, lost=2), TaskAccuracy(max_lost=2))[0] == "pass"


def test_a_fraction_counts_against_the_float_models_right_answers():
    # 20 counted, 30 %: 6 may be lost, the 7th fails.
    assert judge(_cases(kept=14, lost=6), TaskAccuracy(max_lost_fraction=0.3))[0] == "pass"
    status, m, _f, _e = judge(_cases(kept=13, lost=7), TaskAccuracy(max_lost_fraction=0.3))
    assert status == "fail" and m["max_lost"] == 6


def test_a_loop_where_the_float_model_ends_fails_whatever_the_allowance():
    cases = _cases(kept=20, lost=0) + [_case("loop", False, False, loops=True)]
    status, _m, findings, _e = judge(cases, TaskAccuracy(max_lost=50))
    assert status == "fail" and any("never excused" in f for f in findings)


def test_too_few_counted_questions_cannot_judge_a_file():
    status, _m, findings, _e = judge(_cases(kept=3, lost=0), TaskAccuracy())
    assert status == "fail" and any("too few" in f for f in findings)
