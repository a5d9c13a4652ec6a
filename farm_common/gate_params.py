"""Every gate's settings, with their defaults, written once for both environments.

The orchestrator validates a build config's `gates.<gate>:` section with the gate's model here
(farm/gates/<gate>.py registers it; an unknown key or a wrong type is bad input before any work)
and sends the validated values as the request's settings; the toolchain's measurement
(farm_toolchain/gates/<gate>.py) reads the same keys with the same model (`parse`), so a request
written by hand gets the same defaults and the same checks. A default of None means "the
measurement decides" (documented where the measurement does it).

Pydantic and the standard library only: both environments import this module."""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

P = TypeVar("P", bound="GateParams")


class GateParams(BaseModel):
    """A gate's settings (`gates.<gate>: {...}` in a build config): unknown keys are refused, and so
    is a value of the wrong type (strict: `true` is not a count, "0.5" is not a number)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NoParams(GateParams):
    """A gate with no settings: any key given for it is bad input."""


def parse(model: type[P], request: dict[str, Any]) -> P:
    """The settings a request carries (its other keys, files and derived values, are not settings),
    validated by the gate's model; ValueError with one line naming the setting otherwise."""
    given = {k: request[k] for k in model.model_fields if k in request}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        raise ValueError(one_line(exc)) from None


def one_line(exc: ValidationError, prefix: str = "") -> str:
    """A validation error as '<where>: <what>' (the first error: the one to fix first)."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    where = ".".join(x for x in (prefix, loc) if x)
    return f"{where + ': ' if where else ''}{err['msg'].removeprefix('Value error, ')}"


# --- logits_parity_float / logits_parity -------------------------------------------------------------
# Why these numbers: the float export computes the same float32 graph as PyTorch in another order,
# so it should agree almost exactly (measured on the tiny Qwen3.5: top-1 1.0, Pearson 0.99999999,
# max |diff| ~2e-7); one near-tie among 48 positions is tolerated. int8 weights move logits by
# ~1e-2 on the tiny model: random tiny models have flat logits (|logit| < 1) where top-1 is fragile,
# so the quantized gate leans on Pearson and KL; max_abs_diff is scale dependent (real models have
# logits of tens) and is only reported for quantized models. A model that is not the source model
# (negative control: another seed) has Pearson ~0 and fails both.
# Runtime scores (fused exports) are noisier than the Interpreter: on the tiny Qwen3.5 the float
# bundle, whose Interpreter parity is 2e-7, scored mean |Δlogprob| 0.0084, max 0.054 (first target
# token), Pearson 0.998; the int8 bundle 0.0088 / 0.055 / 0.998; the seed-1 bundle (negative
# control) 0.20 / 0.57 / -0.015. The scores_* defaults sit between, with room for trained models.
# A threshold set to null switches that check off.


class _Logits(GateParams):
    positions: int = Field(48, ge=1, description="teacher-forced positions compared")
    top1_min: float | None = Field(None, ge=0, le=1)
    top5_min: float | None = Field(None, ge=0, le=1)
    pearson_min: float | None = Field(None, ge=-1, le=1)
    kl_max: float | None = Field(None, ge=0)
    kl_ratio_max: float | None = Field(None, ge=0)
    max_abs_diff_max: float | None = Field(None, ge=0)
    scores_pearson_min: float | None = Field(None, ge=-1, le=1)
    scores_max_abs_diff_max: float | None = Field(None, ge=0)
    scores_mean_abs_diff_max: float | None = Field(None, ge=0)

    def thresholds(self) -> dict[str, float | None]:
        return self.model_dump(exclude={"positions"})


class LogitsParityFloat(_Logits):
    top1_min: float | None = Field(0.97, ge=0, le=1)
    top5_min: float | None = Field(1.0, ge=0, le=1)
    pearson_min: float | None = Field(0.9999, ge=-1, le=1)
    kl_max: float | None = Field(1e-4, ge=0)
    kl_ratio_max: float | None = Field(1e-3, ge=0)
    max_abs_diff_max: float | None = Field(0.05, ge=0)
    scores_pearson_min: float | None = Field(0.99, ge=-1, le=1)
    scores_max_abs_diff_max: float | None = Field(0.15, ge=0)
    scores_mean_abs_diff_max: float | None = Field(0.02, ge=0)


class LogitsParity(_Logits):
    top1_min: float | None = Field(0.8, ge=0, le=1)
    top5_min: float | None = Field(0.95, ge=0, le=1)
    pearson_min: float | None = Field(0.99, ge=-1, le=1)
    kl_max: float | None = Field(0.05, ge=0)
    kl_ratio_max: float | None = Field(0.05, ge=0)
    scores_pearson_min: float | None = Field(0.95, ge=-1, le=1)
    scores_mean_abs_diff_max: float | None = Field(0.1, ge=0)


# --- generation_parity -------------------------------------------------------------------------------


class GenerationParity(GateParams):
    prompts: list[str] = Field(
        default_factory=lambda: ["The capital of France is", "def fibonacci(n):", "1, 2, 3, 4,", "Hello, my name is"],
        min_length=1,
    )
    max_tokens: int = Field(16, ge=1)
    # Render prompts with the source's chat template (instruct models) or pass them raw (base, tiny).
    chat_template: bool = False
    # A near-tie excuses a prompt only where PyTorch's own top-1/top-2 logit margin is below this, at
    # generated token min_tie_position or later.
    tie_margin: float = Field(0.01, ge=0)
    min_tie_position: int = Field(4, ge=0)
    # Exact matches required (text and stop reason); None: half the prompts, at least 1.
    min_exact_matches: int | None = Field(None, ge=0)
    # An explicit agreeing-prefix allowance (0 = off): the first this-many tokens agree.
    prefix_tokens: int = Field(0, ge=0)
    min_agree_fraction: float = Field(1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _consistent(self) -> "GenerationParity":
        if any(not p.strip() for p in self.prompts):
            raise ValueError("prompts must be non-empty strings")
        if self.min_exact_matches is not None and self.min_exact_matches > len(self.prompts):
            raise ValueError(f"min_exact_matches {self.min_exact_matches} is more than the {len(self.prompts)} prompts")
        return self

    def exact_matches_required(self) -> int:
        return self.min_exact_matches if self.min_exact_matches is not None else max(1, -(-len(self.prompts) // 2))


# --- questions / arithmetic --------------------------------------------------------------------------


class Question(GateParams):
    prompt: str = Field(min_length=1)
    expect: str = Field(min_length=1, description="a regex the reply must match (case-insensitive)")

    @field_validator("expect")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"expect {v!r} is not a valid regex: {exc}") from None
        return v


class Questions(GateParams):
    # The build config's own questions, each checked against the PyTorch model first (faithful
    # conversion includes the model's mistakes).
    questions: list[Question] = Field(min_length=1)
    max_tokens: int = Field(64, ge=1)
    min_pass_fraction: float = Field(1.0, ge=0, le=1)
    system_message: str | None = None
    # Raw text the model continues, no chat template: a base model's completion-style question.
    completion: bool = False


class VisionEncoderParity(GateParams):
    # Per-patch Pearson correlation (over the hidden size) of the encoder's output against PyTorch's
    # vision tower on the shipped images, the smallest patch's. The float export must be the
    # tower (the seeds: 0.9999999999 in fp32); the bundle's encoder may move by its recipe (the
    # seeds' int8 tower held 0.9916-0.9951 on real photographs, their 2B's 0.974-0.984).
    float_min_correlation: float = Field(0.99999, ge=0, le=1)
    min_correlation: float = Field(0.99, ge=0, le=1)


class SecondTurnParity(GateParams):
    # Two user turns on one Conversation; the second reply against PyTorch's on the whole history.
    # The tiny Gemma 3 VL answers the first briefly (a stop token to carry over) and the second at
    # length (a reply the carried token can change).
    turns: list[str] = Field(default_factory=lambda: ["Hello", "Who are you?"], min_length=2, max_length=2)
    max_tokens: int = Field(16, ge=1)


class TextTurnEquality(GateParams):
    # Text-only questions asked of the image bundle and of the text build of the same source and
    # recipe, one fresh Engine each, through their own chat templates.
    prompts: list[str] = Field(default_factory=lambda: ["Hello", "What is 2 + 3?", "Tell me about cats."],
                               min_length=1)
    max_tokens: int = Field(16, ge=1)


class GroundingProbe(GateParams):
    # One of the shipped images (farm_toolchain/gates/images.py): "text" (words drawn in white on
    # black), "shapes" (colored shapes, no text), "noise".
    image: Literal["text", "shapes", "noise"]
    prompt: str = Field(min_length=1)
    expect: str = Field(min_length=1)  # a regex the reply must match (case-insensitive)


class GroundingProbes(GateParams):
    # The seeds' two opposite probes: an image with text -> "Yes", one without -> "No" (trained
    # models only: a config enables the gate with `gates.grounding_probes: {}`).
    probes: list[GroundingProbe] = Field(default_factory=lambda: [
        GroundingProbe(image="text", prompt="Does this image contain text? Answer yes or no.", expect=r"^\W*yes"),
        GroundingProbe(image="shapes", prompt="Does this image contain text? Answer yes or no.", expect=r"^\W*no"),
    ], min_length=1)
    max_tokens: int = Field(16, ge=1)


class ImageTurnParity(GateParams):
    # Each shipped image (made at the bundle's image size: shapes, text drawn in, noise) asked with
    # this prompt through litert-lm with the image attached, against PyTorch through the source's
    # own processor. Defaults: the tiny Gemma 3 VL matched 3 of 3 token for token with the
    # processor's normalization in the encoder's graph, 0 of 3 without it.
    prompt: str = "What is in this image?"
    max_tokens: int = Field(12, ge=1)
    # The fraction of images whose reply must equal PyTorch's, token for token.
    min_exact_fraction: float = Field(1.0, ge=0, le=1)


class Arithmetic(GateParams):
    # None: the measurement's shipped "multiplication" set (farm_toolchain/gates/arithmetic.py).
    problems: list[Question] | None = Field(None, min_length=1)
    max_tokens: int = Field(160, ge=8)
    min_answer_agreement: float = Field(1.0, ge=0, le=1)


# --- tokenizer, robustness ---------------------------------------------------------------------------


class TokenizerString(GateParams):
    text: str
    id: str | None = None
    script: str | None = None


class TokenizerParity(GateParams):
    # Strings to check instead of the shipped set (None: the 182 shipped strings); a string, or one
    # with its id and script for the evidence.
    strings: list[str | TokenizerString] | None = Field(None, min_length=1)
    require_round_trip: bool = False


class PromptLengths(GateParams):
    max_cases: int = Field(48, ge=1)
    # Absolute, in logits (the same meaning as generation_parity's tie_margin).
    tie_margin: float = Field(0.01, ge=0)
    # |runtime - PyTorch| log-probability of PyTorch's first token, in nats (measured: int8 moves a
    # token by up to 0.7 nats on SmolLM2-135M, 0.09 on the tiny Qwen3.5).
    max_logprob_diff: float = Field(1.0, gt=0)
    # Why litert-lm's run_text_scoring is known to differ from PyTorch on this model whatever the
    # recipe, with the measurement (a near-float bundle over the limit too). Scores over the limit
    # then warn instead of failing; a first token that differs still fails.
    known_score_drift: str | None = Field(None, min_length=40)


class MultiTurn(GateParams):
    # Short, so that three turns fit the 64-token cache of the tiny test models.
    turns: list[str] = Field(default_factory=lambda: ["Hi!", "What is 2 + 3?", "Thanks!"], min_length=2)
    system: str | None = Field(None, min_length=1)
    # None: from the bundle's capacity (the measurement: capacity // 24, within [2, 32]).
    max_output_tokens: int | None = Field(None, ge=1)

    @field_validator("turns")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if any(not t for t in v):
            raise ValueError("turns must be non-empty user messages")
        return v


class StateIsolation(GateParams):
    known_difference: str | None = Field(None, min_length=10, description="why a difference is expected")
    # None: from the bundle's capacity (the measurement: capacity // 16, within [2, 32]).
    max_output_tokens: int | None = Field(None, ge=1)


# --- task_accuracy ------------------------------------------------------------------------------------
# A quality gate at task level: the shipped question set (68 everyday questions with checkable answers:
# capitals, sums, products, opposites, facts; farm_toolchain/data/task_questions.json) asked of the
# bundle and of the float model; only the questions the float model answers right count, and the
# bundle may lose at most `max_lost` of them. A smoke test of 8 questions passes files that have lost
# most of their ability (litert-torch #1068: int4 channelwise gave Qwen3-0.6B 0 % on GSM8K while an
# 8-question smoke test passed); a loss counted against the float model's own right answers does not.


class TaskAccuracy(GateParams):
    set: str = Field("everyday", min_length=1, description="a shipped question set")
    # Raw text the model continues (a base model), else the chat question through the chat template.
    completion: bool = False
    system_message: str | None = None
    max_tokens: int = Field(24, ge=1)
    # Answers of the float model's the file may lose: a number, else a fraction of the counted ones
    # (what a recipe's allowances give, farm/recipes/allowances.py), else 2.
    max_lost: int | None = Field(None, ge=0)
    max_lost_fraction: float | None = Field(None, ge=0, le=1)
    # Fewer questions than this answered right by the float model: too few to judge a file by (fail).
    min_counted: int = Field(10, ge=1)
    # Ask only the first this-many questions (None: all): for tests and quick looks, never for a claim.
    limit: int | None = Field(None, ge=1)
