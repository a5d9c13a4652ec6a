"""The degeneration detector (farm_toolchain/gates/degeneration.py): standard library only, so the
orchestrator's pytest imports it directly."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from farm_toolchain.gates import degeneration
from farm_toolchain.gates.degeneration import detect

# The seeds' CPU arithmetic failure: "What is 17 times 23?" answered with a line repeated to the cap.
STEP = "17 × 23 = 17 × 20 + 17 × 3 = 340 + 51 = 391\n"
LOOPING_LINES = "To multiply 17 by 23, split 23 into 20 + 3:\n" + STEP * 11 + STEP[:19]
# ... and the loop inside one line.
LOOPING_NGRAM = "17 × 23 " + "= 17 × 23 " * 30 + "= 17"
CLEAN = "17 × 23 = 17 × 20 + 17 × 3 = 340 + 51 = 391.\n\nSo 17 times 23 is **391**."


def test_clean_reply_passes():
    for ids, cap in ((None, 64), (list(range(30)), 64), (list(range(64)), 64)):
        got = detect(CLEAN, ids, cap)
        assert got["degenerate"] is False and got["reason"] is None, got


def test_looping_lines_to_the_cap_are_flagged():
    got = detect(LOOPING_LINES, list(range(400)), 400)
    assert got == {"degenerate": True, "reason": "repeated_line", "detail": got["detail"]}
    assert "17 × 20 + 17 × 3" in got["detail"]
    # Without token ids (cap unknown) the loop is long enough to be flagged too.
    assert detect(LOOPING_LINES, None, 400)["reason"] == "repeated_line"


def test_looping_ngram_is_flagged():
    got = detect(LOOPING_NGRAM, None, 128)
    assert got["degenerate"] and got["reason"] == "repeated_ngram", got
    assert "'= 17 × 23 '" in got["detail"] or "17 × 23 =" in got["detail"]


def test_repeated_tokens_use_token_ids():
    ids = [5, 9, 11] + [42, 7] * 20
    got = detect("whatever the ids decode to", ids, len(ids))
    assert got["reason"] == "repeated_ngram" and "2-token unit" in got["detail"], got


def test_dollar_loop_from_the_card():
    got = detect("The product is $391$ " + "$391$ " * 40, None, 256)
    assert got["reason"] == "repeated_ngram", got


def test_empty_reply():
    for text in ("", "   \n\n  "):
        got = detect(text, [], 64)
        assert got["degenerate"] and got["reason"] == "empty"


def test_repetition_that_ends_before_the_cap_is_not_degenerate():
    text = "ha " * 12 + "\nOK."
    got = detect(text, list(range(20)), 64)
    assert got["degenerate"] is False
    got = detect(STEP * 5, list(range(50)), 64)
    assert got["degenerate"] is False and "before the token cap" in got["detail"]


def test_hit_cap_overrides_token_count():
    assert detect(STEP * 5, None, 64, hit_cap=True)["reason"] == "repeated_line"
    assert detect(STEP * 5, None, 64, hit_cap=False)["degenerate"] is False


def test_long_unrepetitive_reply_at_the_cap_is_clean():
    text = (
        "Paris is the capital of France. It lies on the Seine, has about two million inhabitants in the "
        "city proper, and is known for the Louvre, the Eiffel Tower and Notre-Dame. Its metropolitan area "
        "is one of the largest in Europe, and it has been"
    )
    assert detect(text, list(range(64)), 64)["degenerate"] is False


def test_short_lists_and_tables_are_clean():
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n"
    assert detect(table, None, 64)["degenerate"] is False
    assert detect("1. red\n2. green\n3. blue\n", None, 64)["degenerate"] is False


def test_whitespace_loop_to_the_cap():
    text = "The answer is 391." + "\n" * 60
    got = detect(text, [10, 11, 12, 13] + [201] * 60, 64)
    assert got["reason"] == "repeated_ngram", got
    assert detect(text, None, 64, hit_cap=True)["reason"] == "repeated_ngram"


# Recorded on the tiny Qwen3.5 (examples/tiny-qwen35.yaml, seed 0): litert-lm 0.18.1 CPU and PyTorch
# both answered the chat-rendered prompt "def fib(n):" with this loop to the 16-token cap.
RECORDED_LOOP_TEXT = "\ufffd\u4ec0\ufffditsitsitsitsitsitsitsitsitsitsitsits"
RECORDED_LOOP_IDS = [141, 384, 225, 427] + [506] * 12
# ... and this reply (gate_questions, max_tokens 64) that trails into tabs but ended at 30 tokens.
RECORDED_STOPPED = "\ufffd\ufffdf\u000f\u0019\u007f\u0002\ufffdl\ufffdbony T he" + "\t" * 16


def test_recorded_runtime_loop():
    assert detect(RECORDED_LOOP_TEXT, RECORDED_LOOP_IDS, 16)["reason"] == "repeated_ngram"
    assert detect(RECORDED_LOOP_TEXT, None, 16, hit_cap=True)["reason"] == "repeated_ngram"
    assert detect(RECORDED_LOOP_TEXT, None, 16)["reason"] == "repeated_ngram"  # cap unknown: still clear


def test_recorded_reply_that_stopped_is_clean():
    got = detect(RECORDED_STOPPED, None, 64, hit_cap=False)
    assert got["degenerate"] is False and "before the token cap" in got["detail"]


def test_text_must_be_a_string():
    with pytest.raises(TypeError):
        detect(None, None, 64)  # type: ignore[arg-type]


def test_stdlib_only():
    tree = ast.parse(Path(degeneration.__file__).read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods.add(node.module.split(".")[0])
    assert mods <= {"__future__", "typing"}, mods
