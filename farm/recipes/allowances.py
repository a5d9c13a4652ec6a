"""Allowances: what a recipe's bytes are allowed to cost, declared by the recipe (`allowances:`) or
taken from the farm's default for its bit width, and turned into the settings of the gates that
judge them. The published figures these defaults answer to, and why each number: docs/recipes.md.

    allowances:
      kl_max: 0.2            # logits_parity: mean KL vs the PyTorch float model
      top1_min: 0.7          # logits_parity: top-1 agreement
      top5_min: 0.85, pearson_min: 0.9   # logits_parity
      prefix_tokens: 3       # generation_parity: a reply agrees when its first N tokens do
      min_agree_fraction: 0.75  # generation_parity: replies that must agree (exactly, near-tie or prefix)
      tie_margin: 0.25       # generation_parity and prompt_lengths: a near-tie PyTorch itself barely decided
      max_lost_fraction: 0.3  # task_accuracy: answers of the float model's the file may lose
      min_answer_fraction: 0.7  # questions, arithmetic: share of the float model's right answers kept
      basis: "why these numbers"

Precedence, per gate setting: the build config's own `gates:` section, then the recipe's
allowances, then the default of the recipe's class (its smallest weight bit width), then the
gate's own default. Nothing excuses a file that runs past its end of turn or loops where the
reference ends: those rules have no allowance (generation_parity, arithmetic, task_accuracy)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Allowances(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kl_max: float | None = Field(None, ge=0)
    top1_min: float | None = Field(None, ge=0, le=1)
    top5_min: float | None = Field(None, ge=0, le=1)
    pearson_min: float | None = Field(None, ge=-1, le=1)
    prefix_tokens: int | None = Field(None, ge=0)
    min_exact_matches: int | None = Field(None, ge=0)
    min_agree_fraction: float | None = Field(None, ge=0, le=1)
    tie_margin: float | None = Field(None, ge=0)
    max_lost_fraction: float | None = Field(None, ge=0, le=1)
    # The share of the float model's right answers a short answer set must keep (questions,
    # arithmetic): the complement of max_lost_fraction where a class sets it.
    min_answer_fraction: float | None = Field(None, ge=0, le=1)
    basis: str = ""

    def gate_settings(self, counted_hint: int | None = None) -> dict[str, dict[str, Any]]:
        """{gate: {setting: value}} for the settings this allowance sets."""
        out: dict[str, dict[str, Any]] = {}

        def put(gate: str, key: str, value: Any) -> None:
            if value is not None:
                out.setdefault(gate, {})[key] = value

        put("logits_parity", "kl_max", self.kl_max)
        put("logits_parity", "top1_min", self.top1_min)
        put("logits_parity", "top5_min", self.top5_min)
        put("logits_parity", "pearson_min", self.pearson_min)
        put("generation_parity", "prefix_tokens", self.prefix_tokens)
        put("generation_parity", "min_exact_matches", self.min_exact_matches)
        put("generation_parity", "min_agree_fraction", self.min_agree_fraction)
        put("generation_parity", "tie_margin", self.tie_margin)
        put("prompt_lengths", "tie_margin", self.tie_margin)
        put("task_accuracy", "max_lost_fraction", self.max_lost_fraction)
        put("questions", "min_pass_fraction", self.min_answer_fraction)
        put("arithmetic", "min_answer_agreement", self.min_answer_fraction)
        return out


# The farm's defaults per class. 8-bit is the gates' own defaults (farm_common/gates/), which
# every int8 result on record was judged by; 4-bit and below answer to the published 4-bit figures
# (docs/recipes.md: llama.cpp's KL tables, litert-torch #1068's GSM8K, the seeds' GSM8K table).
DEFAULTS: dict[str, Allowances] = {
    "float": Allowances(max_lost_fraction=0.05, basis=(
        "float weights (float32 kept, or float16): only arithmetic order differs from PyTorch; bf16 vs fp16 "
        "moves llama.cpp's mean KLD by 0.000025, so at most 5 % of the float model's answers may change")),
    "int8": Allowances(max_lost_fraction=0.2, basis=(
        "8-bit weights: the gates' own defaults (KL <= 0.05, top-1 >= 0.8, Pearson >= 0.99 over 48 multilingual "
        "positions; measured SmolLM2-135M int8: KL 0.032, top-1 0.94; every short-set answer kept); llama.cpp's "
        "q8_0 keeps top-1 at 97.7 % of positions (8B): a 10-token answer stays on the float path 0.977^10 = "
        "79 % of the time, so at most 20 % of the float model's answers on the 68-question set may change "
        "(measured SmolLM2-135M dynamic int8: 7 of 49 lost, 5 gained)")),
    "int4": Allowances(kl_max=0.25, top1_min=0.65, top5_min=0.85, pearson_min=0.9, prefix_tokens=3,
                       min_agree_fraction=0.75, max_lost_fraction=0.3, min_answer_fraction=0.7, basis=(
        "4-bit weights: llama.cpp's q4_K_M keeps the float model's top-1 token at 91.9 % of positions "
        "(8B; q8_0 97.7 %) with a mean KLD 23x q8_0's (0.031 vs 0.00136): a reply keeps its first 3 tokens "
        "0.919^3 = 78 % of the time, a 10-token answer its whole path 43 %; litert-torch #1068: int4 "
        "blockwise-32 kept Qwen3-0.6B at 50 % of GSM8K where bf16 scores 66 % (24 % of the answers lost). "
        "Allowed: parity KL <= 0.25, top-1 >= 0.65, top-5 >= 0.85, Pearson >= 0.9 on the multilingual parity "
        "text; replies agreeing on their first 3 tokens for 75 % of the prompts; 30 % of the float model's "
        "answers lost (70 % kept on the short sets). Looping, or running past the end of turn where the "
        "float model ends, is never allowed")),
    "int2": Allowances(kl_max=0.5, top1_min=0.5, top5_min=0.7, pearson_min=0.8, prefix_tokens=2,
                       min_agree_fraction=0.5, max_lost_fraction=0.5, min_answer_fraction=0.5, basis=(
        "2-bit weights: llama.cpp's q2_K moves an 8B model to mean KLD 0.445, top-1 71.1 %")),
}


def recipe_class(min_bits: int | None) -> str:
    """The class of a recipe by the smallest weight bit width it writes (None: nothing quantized)."""
    if min_bits is None or min_bits >= 16:
        return "float"
    if min_bits >= 8:
        return "int8"
    if min_bits >= 4:
        return "int4"
    return "int2"
