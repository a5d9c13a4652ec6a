"""farm_common/gates/<gate>.py: every gate's settings and defaults, read the same way by the orchestrator
(build config) and the toolchain (`parse` of a request)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from farm_common.gates.generation_parity import GenerationParity
from farm_common.gates.logits_parity import LogitsParity, LogitsParityFloat
from farm_common.gates.multi_turn import MultiTurn
from farm_common.gates.prompt_lengths import PromptLengths
from farm_common.gates.questions import Question, Questions
from farm_common.gates.registry import NoParams, parse
from farm_common.gates.state_isolation import StateIsolation
from farm_common.gates.tokenizer_parity import TokenizerParity, TokenizerString

# --- parse -----------------------------------------------------------------------------------------


def test_parse_ignores_keys_that_are_not_settings_and_applies_defaults():
    request = {"bundle_path": "/x.litertlm", "model_dir": "/m", "reference_stop_ids": [2], "max_tokens": 5}
    p = parse(GenerationParity, request)
    assert p.max_tokens == 5
    assert p.prompts == GenerationParity().prompts and len(p.prompts) == 4
    assert (p.chat_template, p.tie_margin, p.min_tie_position, p.min_exact_matches, p.prefix_tokens,
            p.min_agree_fraction) == (False, 0.01, 4, None, 0, 1.0)
    assert not hasattr(p, "bundle_path")
    # The model itself still refuses an unknown key: parse only leaves the request's other keys out.
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        GenerationParity.model_validate({"bundle_path": "/x"})


def test_parse_of_an_empty_request_is_the_defaults():
    assert parse(PromptLengths, {}) == PromptLengths()
    assert parse(PromptLengths, {}).model_dump() == {"max_cases": 48, "tie_margin": 0.01, "max_logprob_diff": 1.0,
                                                          "known_score_drift": None}


@pytest.mark.parametrize("model, request_, key", [
    (GenerationParity, {"max_tokens": "lots"}, "max_tokens"),
    (GenerationParity, {"prompts": "not a list"}, "prompts"),
    (GenerationParity, {"max_tokens": 0}, "max_tokens"),
    (PromptLengths, {"max_logprob_diff": 0}, "max_logprob_diff"),
    (PromptLengths, {"known_score_drift": "too short"}, "known_score_drift"),  # a reason with its measurement
    (LogitsParity, {"pearson_min": 2.0}, "pearson_min"),
    (MultiTurn, {"turns": ["only one"]}, "turns"),
])
def test_parse_refuses_a_wrong_value_with_one_line_naming_the_key(model, request_, key):
    with pytest.raises(ValueError) as info:
        parse(model, {"bundle_path": "/x", **request_})
    message = str(info.value)
    assert message.startswith(f"{key}: "), message
    assert "\n" not in message
    assert not isinstance(info.value, ValidationError)  # a plain ValueError, one line


def test_parse_reports_the_nested_location():
    with pytest.raises(ValueError, match=r"^questions\.0\.expect: expect '\(a' is not a valid regex"):
        parse(Questions, {"questions": [{"prompt": "x", "expect": "(a"}]})


@pytest.mark.parametrize("request_", [{"max_cases": True}, {"tie_margin": "0.5"}])
def test_parse_refuses_a_boolean_or_a_string_for_a_number(request_):
    with pytest.raises(ValueError):
        parse(PromptLengths, request_)


# --- generation_parity -----------------------------------------------------------------------------


@pytest.mark.parametrize("prompts, expected", [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3)])
def test_exact_matches_required_is_half_the_prompts_rounded_up(prompts, expected):
    p = GenerationParity(prompts=[f"p{i}" for i in range(prompts)])
    assert p.exact_matches_required() == expected


def test_exact_matches_required_is_the_explicit_setting_when_given():
    p = GenerationParity(prompts=["a", "b", "c", "d"], min_exact_matches=4)
    assert p.exact_matches_required() == 4
    assert GenerationParity(prompts=["a", "b"], min_exact_matches=0).exact_matches_required() == 0


def test_min_exact_matches_above_the_prompt_count_is_refused():
    assert parse(GenerationParity, {"prompts": ["a", "b"], "min_exact_matches": 2}).min_exact_matches == 2
    with pytest.raises(ValueError, match="^min_exact_matches 3 is more than the 2 prompts$"):
        parse(GenerationParity, {"prompts": ["a", "b"], "min_exact_matches": 3})
    # Against the default prompts (4) too.
    with pytest.raises(ValueError, match="more than the 4 prompts"):
        parse(GenerationParity, {"min_exact_matches": 5})


def test_blank_prompts_are_refused():
    with pytest.raises(ValueError, match="prompts must be non-empty strings"):
        parse(GenerationParity, {"prompts": ["ok", "  "]})
    with pytest.raises(ValueError, match="^prompts: "):
        parse(GenerationParity, {"prompts": []})


# --- questions -------------------------------------------------------------------------------------


def test_question_expect_must_be_a_regex():
    q = Question(prompt="Capital of France?", expect=r"\bparis\b")
    assert q.expect == r"\bparis\b"
    with pytest.raises(ValidationError, match=r"expect '\(unclosed' is not a valid regex"):
        Question(prompt="x", expect="(unclosed")
    with pytest.raises(ValidationError):
        Question(prompt="", expect="x")


def test_questions_need_at_least_one():
    assert parse(Questions, {"questions": [{"prompt": "2+3?", "expect": "5"}]}).max_tokens == 64
    with pytest.raises(ValueError, match="^questions: Field required"):
        parse(Questions, {})
    with pytest.raises(ValueError, match="^questions: "):
        parse(Questions, {"questions": []})


# --- tokenizer_parity ------------------------------------------------------------------------------


def test_tokenizer_parity_strings_take_plain_strings_and_text_id_script_objects():
    p = parse(TokenizerParity, {"strings": ["héllo", {"text": "नमस्ते", "id": "hi-1", "script": "Deva"},
                                               {"text": "only text"}]})
    assert p.strings[0] == "héllo"
    assert p.strings[1] == TokenizerString(text="नमस्ते", id="hi-1", script="Deva")
    assert p.strings[2].model_dump() == {"text": "only text", "id": None, "script": None}
    assert parse(TokenizerParity, {}).strings is None


@pytest.mark.parametrize("strings", [[], [5], [{"id": "x"}], [{"text": "a", "lang": "en"}], "one string"])
def test_tokenizer_parity_strings_refuse_other_shapes(strings):
    with pytest.raises(ValueError, match="^strings"):
        parse(TokenizerParity, {"strings": strings})


# --- logits parity ---------------------------------------------------------------------------------


def test_float_and_quantized_logits_parity_defaults_differ():
    f, q = LogitsParityFloat(), LogitsParity()
    assert f.positions == q.positions == 48
    assert f.thresholds() != q.thresholds()
    assert f.top1_min == 0.97 and q.top1_min == 0.8
    assert f.pearson_min == 0.9999 and q.pearson_min == 0.99
    assert f.max_abs_diff_max == 0.05 and q.max_abs_diff_max is None  # scale dependent: float only
    # Every float threshold is at least as strict as the quantized one.
    for key, fv in f.thresholds().items():
        qv = q.thresholds()[key]
        if fv is None or qv is None:
            continue
        assert (fv >= qv) if key.endswith("_min") else (fv <= qv), key


def test_thresholds_exclude_positions_and_keep_switched_off_checks():
    t = LogitsParity(positions=7, kl_max=None).thresholds()
    assert "positions" not in t
    assert set(t) == set(LogitsParity.model_fields) - {"positions"}
    assert "kl_max" in t and t["kl_max"] is None
    assert parse(LogitsParityFloat, {"positions": 7}).positions == 7


# --- the others ------------------------------------------------------------------------------------


def test_multi_turn_and_state_isolation_refusals():
    assert parse(MultiTurn, {"turns": ["a", "b"]}).turns == ["a", "b"]
    with pytest.raises(ValueError, match="turns must be non-empty user messages"):
        parse(MultiTurn, {"turns": ["a", ""]})
    assert parse(StateIsolation, {"known_difference": "recurrent state is kept"}).known_difference
    with pytest.raises(ValueError, match="^known_difference: "):
        parse(StateIsolation, {"known_difference": "short"})


def test_no_params_refuses_every_key_but_parse_reads_none():
    assert parse(NoParams, {"bundle_path": "/x", "anything": 1}) == NoParams()
    with pytest.raises(ValidationError):
        NoParams.model_validate({"anything": 1})


def test_settings_models_are_frozen():
    p = PromptLengths()
    with pytest.raises(ValidationError):
        p.max_cases = 3  # type: ignore[misc]
