"""generation_parity: greedy litert-lm output of the bundle against PyTorch greedy on the same ids,
stopping where the source's own generation settings stop (farm_toolchain/gates/generation_parity.py
documents the measurement and every pass rule, and why)."""

from __future__ import annotations

from pydantic import Field, model_validator

from farm_common.gates.registry import GATES, GateRequest, against_reference, GateParams


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


@GATES.register("generation_parity", kind="parity", version=3, params=GenerationParity, per_class=True, order=20,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="greedy output of the bundle in litert-lm vs PyTorch greedy, stop reason included")
def request(ctx, p: GenerationParity) -> GateRequest:
    return against_reference(ctx, p)
