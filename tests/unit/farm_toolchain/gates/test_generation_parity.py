"""generation_parity's pure parts (farm_toolchain/gates/generation_parity.py): what litert-lm does to
a reply's text (withholding a stop string's beginning at the cap, ending at a NUL) told apart from a
reply that differs."""

from __future__ import annotations

from farm_toolchain.gates.generation_parity import cut_at_nul, withheld_at_cap

STOPS = [":<|end_of_text|>\n", ",<|end_of_text|>\n", "<|end_of_text|>\n"]


def test_a_trailing_piece_that_may_begin_a_stop_string_is_withheld():
    # Measured on the tiny Granite: PyTorch 16 ':' to the cap, litert-lm 15.
    assert withheld_at_cap(":" * 16, ":" * 15, STOPS) == (":", ":<|end_of_text|>\n")
    assert withheld_at_cap("a, b,", "a, b", STOPS) == (",", ",<|end_of_text|>\n")


def test_a_reply_that_differs_is_not_withheld():
    assert withheld_at_cap(":" * 16, ":" * 16, STOPS) is None  # identical: nothing withheld
    assert withheld_at_cap("abc", "ab", STOPS) is None  # 'c' begins no stop string
    assert withheld_at_cap("a::", "a", STOPS) is None  # '::' begins none either
    assert withheld_at_cap(":x", "x", STOPS) is None  # not a prefix of PyTorch's
    assert withheld_at_cap("a:", "a", []) is None  # a bundle without stop strings withholds nothing


def test_a_reply_ending_at_pytorchs_first_nul_is_cut_there():
    # Measured on the tiny Ministral: PyTorch '…em\x00L\x1e', litert-lm '…em'.
    assert cut_at_nul("=\x0bem\x00L\x1e", "=\x0bem") == 4
    assert cut_at_nul("\x00abc", "") == 0


def test_a_reply_that_differs_before_the_nul_is_not_cut():
    assert cut_at_nul("=\x0bem\x00L", "=\x0bex") is None
    assert cut_at_nul("=\x0bem\x00L", "=\x0be") is None  # shorter than the text before the NUL
    assert cut_at_nul("no nul here", "no nul") is None
