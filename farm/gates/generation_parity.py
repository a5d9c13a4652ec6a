"""generation_parity: greedy litert-lm output of the bundle against PyTorch greedy on the same ids,
stopping where the source's own generation settings stop (farm_toolchain/gates/generation_parity.py
documents the measurement and every pass rule, and why)."""

from __future__ import annotations

from pydantic import Field

from farm.gates import GateParams, GateRequest, register


class Params(GateParams):
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

    def model_post_init(self, _ctx) -> None:
        if any(not p.strip() for p in self.prompts):
            raise ValueError("prompts must be non-empty strings")
        if self.min_exact_matches is not None and self.min_exact_matches > len(self.prompts):
            raise ValueError(f"min_exact_matches {self.min_exact_matches} is more than the {len(self.prompts)} prompts")


@register("generation_parity", kind="parity", version=2, params=Params,
          sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
          description="greedy output of the bundle in litert-lm vs PyTorch greedy, stop reason included")
def request(ctx, p: Params) -> GateRequest:
    args = p.model_dump(exclude={"chat_template", "min_exact_matches"})
    if p.min_exact_matches is not None:
        args["min_exact_matches"] = p.min_exact_matches
    return GateRequest(
        inputs={"bundle_path": "bundle", "model_dir": "reference"},
        args={**args, "apply_chat_template": p.chat_template, "reference_stop_ids": ctx.reference_stop_ids},
    )
