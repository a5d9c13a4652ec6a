"""Small pure helpers of the gate measurements (chat_template, generation_parity, tokenizer_parity,
state_isolation), and a static check that every gate reads its settings through the shared model
(farm_common/gates/) and never by hand, so a hand-written request gets the same defaults and
the same refusals as a build config."""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap

import pytest

from farm_common.gates.registry import GATES
from farm_toolchain.gates import (
    chat_template,
    generation_parity,
    state_isolation,
    tokenizer_parity,
)
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

# --- chat_template ---------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b, at", [
    ("same", "same", None),
    ("", "", None),
    ("abc", "abd", 2),
    ("xbc", "abc", 0),
    ("ab", "abc", 2),  # one is a prefix of the other: where the shorter ends
    ("abc", "ab", 2),
    ("", "a", 0),
])
def test_first_difference(a, b, at):
    assert chat_template.first_difference(a, b) == at


def test_conversations_default_and_valid():
    assert chat_template._conversations(None) is chat_template.DEFAULT_CONVERSATIONS
    raw = [{"name": "one", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}]
    assert chat_template._conversations(raw) is raw


@pytest.mark.parametrize("raw, message", [
    ([], "conversations must be a non-empty list"),
    ("system + user", "conversations must be a non-empty list"),
    (["not an object"], r"conversations\[0\]\.messages must be a non-empty list"),
    ([{"name": "x"}], r"conversations\[0\]\.messages must be"),
    ([{"messages": []}], r"conversations\[0\]\.messages must be"),
    ([{"messages": [{"content": "no role"}]}], r"conversations\[0\]\.messages must be"),
    ([{"messages": [{"role": "user", "content": "ok"}]}, {"messages": ["text"]}], r"conversations\[1\]\.messages"),
    ([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}],
     r"conversations\[0\] must end with a user message"),
])
def test_conversations_refusals(raw, message):
    with pytest.raises(BadInput, match=message):
        chat_template._conversations(raw)


def test_default_conversations_pass_their_own_validation():
    defaults = chat_template.DEFAULT_CONVERSATIONS
    assert chat_template._conversations(list(defaults)) == defaults


# --- generation_parity -----------------------------------------------------------------------------


class ByteTokenizer:
    """decode(ids) of a byte-level vocabulary: a token may end mid-character (U+FFFD until completed)."""

    def __init__(self, vocab: dict[int, bytes]):
        self.vocab = vocab

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        assert skip_special_tokens is False  # the gate compares the raw text, specials included
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", "replace")


def test_matching_prefix_counts_the_tokens_that_agree():
    tok = ByteTokenizer({1: b"Hel", 2: b"lo", 3: b" world", 4: b" there"})
    assert generation_parity._matching_prefix(tok, [1, 2, 3], "Hello world") == 3
    assert generation_parity._matching_prefix(tok, [1, 2, 3], "Hello there") == 2
    assert generation_parity._matching_prefix(tok, [1, 2, 3], "Goodbye") == 0
    assert generation_parity._matching_prefix(tok, [], "anything") == 0


def test_matching_prefix_does_not_stop_at_a_partial_character():
    # "é" is two bytes in two tokens: the first alone decodes to U+FFFD, no prefix of "é!".
    tok = ByteTokenizer({1: b"\xc3", 2: b"\xa9", 3: b"!", 4: b"?"})
    assert tok.decode([1], skip_special_tokens=False) == "\ufffd"
    assert generation_parity._matching_prefix(tok, [1, 2, 3], "é!") == 3
    assert generation_parity._matching_prefix(tok, [1, 2, 4], "é!") == 2


# --- tokenizer_parity ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, marks", [
    ("e\u0301", True),  # NFD: e + combining acute
    ("é", False),  # NFC: one precomposed letter
    ("नमस्ते", True),  # Devanagari vowel signs and virama
    ("مَرْحَبًا", True),  # Arabic harakat
    ("Hello, world! 123", False),
    ("東京", False),
    ("", False),
])
def test_has_combining_marks(text, marks):
    assert tokenizer_parity.has_combining_marks(text) is marks


# --- state_isolation -------------------------------------------------------------------------------


def test_conv_spec_normalizes_a_valid_conversation():
    assert state_isolation._conv_spec({"turns": ["Hi"]}, "pairs[0].a") == {
        "system": None, "turns": ["Hi"], "max_output_tokens": None}
    assert state_isolation._conv_spec({"system": "Be brief.", "turns": ["a", "b"], "max_output_tokens": 3, "x": 1},
                                      "w") == {"system": "Be brief.", "turns": ["a", "b"], "max_output_tokens": 3}


def test_the_default_pairs_are_valid():
    """Each default pair normalizes to itself (the spec's own fields) and the pair's two
    conversations differ; the control: a pair with a broken side is refused."""
    assert state_isolation.DEFAULT_PAIRS
    for i, pair in enumerate(state_isolation.DEFAULT_PAIRS):
        a = state_isolation._conv_spec(pair["a"], f"{i}.a")
        b = state_isolation._conv_spec(pair["b"], f"{i}.b")
        assert a["turns"] and b["turns"] and a != b
    broken = {**state_isolation.DEFAULT_PAIRS[0]["b"], "turns": []}
    with pytest.raises(Exception, match="turns must be a non-empty list"):
        state_isolation._conv_spec(broken, "0.b")


@pytest.mark.parametrize("raw, message", [
    (None, r"^pairs\[1\]\.b must be an object \{system, turns\}$"),
    (["Hi"], r"^pairs\[1\]\.b must be an object"),
    ({"system": "", "turns": ["Hi"]}, r"^pairs\[1\]\.b\.system must be a non-empty string or null$"),
    ({"system": 5, "turns": ["Hi"]}, r"\.system must be"),
    ({}, r"^pairs\[1\]\.b\.turns must be a non-empty list of user messages$"),
    ({"turns": []}, r"\.turns must be"),
    ({"turns": "Hi"}, r"\.turns must be"),
    ({"turns": ["Hi", ""]}, r"\.turns must be"),
    ({"turns": ["Hi", 3]}, r"\.turns must be"),
    ({"turns": ["Hi"], "max_output_tokens": 0},
     r"^pairs\[1\]\.b\.max_output_tokens must be a positive integer or null$"),
    ({"turns": ["Hi"], "max_output_tokens": True}, r"\.max_output_tokens must be"),
    ({"turns": ["Hi"], "max_output_tokens": "4"}, r"\.max_output_tokens must be"),
])
def test_conv_spec_refusals(raw, message):
    with pytest.raises(BadInput, match=message):
        state_isolation._conv_spec(raw, "pairs[1].b")


# --- settings are read through the shared model ----------------------------------------------------

ARG_PARSERS = {"int_arg", "number_arg", "bool_arg", "fraction_arg", "str_list"}


def settings_read_by_hand(source: str, fields: set[str]) -> list[str]:
    """'<line>: <how>' for every place in `source` that reads one of `fields` from the request without
    the model: request.get("<field>", ...), request["<field>"], or one of common's parsers
    (common.int_arg(request, "<field>", ...), number_arg, bool_arg, fraction_arg, str_list; also
    called by their bare names)."""

    def literal(node: ast.AST | None) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    def is_request(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == "request"

    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if isinstance(func, ast.Attribute) and name == "get" and is_request(func.value) and node.args:
                key = literal(node.args[0])
                if key in fields:
                    found.append((node.lineno, f"request.get({key!r})"))
            elif name in ARG_PARSERS and len(node.args) >= 2 and is_request(node.args[0]):
                key = literal(node.args[1])
                if key in fields:
                    found.append((node.lineno, f"{name}(request, {key!r})"))
        elif isinstance(node, ast.Subscript) and is_request(node.value):
            key = literal(node.slice)
            if key in fields:
                found.append((node.lineno, f"request[{key!r}]"))
    return [f"{line}: {how}" for line, how in sorted(found)]


CRAFTED = textwrap.dedent("""\
    from farm_toolchain.gates import common
    from farm_toolchain.gates.common import bool_arg

    def measure(request):
        p = common.settings(request, Model)                   # the one right way
        n = request.get("max_tokens", 16)                     # 6: by hand
        m = common.int_arg(request, "max_tokens", 16)         # 7: by hand
        t = bool_arg(request, "chat_template", False)         # 8: by hand, bare name
        f = common.fraction_arg(request, "min_agree_fraction", 1.0)  # 9
        s = request["prompts"]                                # 10
        ok1 = request.get("bundle_path")                      # not a setting
        ok2 = common.int_arg(request, "max_evidence", 8)      # not a setting
        ok3 = raw.get("max_tokens")                           # another dict (a conversation spec)
        ok4 = request.get(key)                                # not a literal key
        ok5 = p.max_tokens
""")


def test_settings_read_by_hand_finds_each_way_of_bypassing_the_model():
    fields = {"max_tokens", "chat_template", "min_agree_fraction", "prompts"}
    assert settings_read_by_hand(CRAFTED, fields) == [
        "6: request.get('max_tokens')",
        "7: int_arg(request, 'max_tokens')",
        "8: bool_arg(request, 'chat_template')",
        "9: fraction_arg(request, 'min_agree_fraction')",
        "10: request['prompts']",
    ]
    # The same source against other fields finds nothing.
    assert settings_read_by_hand(CRAFTED, {"positions", "turns"}) == []


def gate_modules() -> dict[str, set[str]]:
    """toolchain module -> the field names of the settings models of the gates it measures."""
    measurements = MEASUREMENTS.load()
    out: dict[str, set[str]] = {}
    for spec in GATES:
        module = measurements[spec.name].__module__
        out.setdefault(module, set()).update(spec.params.model_fields)
    return out


def test_every_gate_module_reads_its_settings_through_the_shared_model():
    modules = gate_modules()
    # One module per gate, except logits parity: one measurement, two gates, two models.
    assert modules["farm_toolchain.gates.logits_parity"] >= {"positions", "top1_min", "max_abs_diff_max"}
    assert MEASUREMENTS.get("logits_parity_float").__module__ == "farm_toolchain.gates.logits_parity"
    for spec in GATES:
        if spec.name not in ("logits_parity_float",):
            assert MEASUREMENTS.get(spec.name).__module__ == f"farm_toolchain.gates.{spec.name}", spec.name
    checked = {m: f for m, f in modules.items() if f}
    assert len(checked) >= 8  # every gate with settings: a vacuous loop would not fail otherwise
    offenders = {}
    for module, fields in checked.items():
        found = settings_read_by_hand(inspect.getsource(sys.modules[module]), fields)
        if found:
            offenders[module] = found
    assert offenders == {}
