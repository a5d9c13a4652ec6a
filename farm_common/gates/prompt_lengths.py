"""prompt_lengths: the first token across every prefill boundary, a fresh Engine per length, against
PyTorch; near-ties by an absolute logit margin, and the first token's log-probability gated."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateRequest, against_reference, GateParams


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


@GATES.register("prompt_lengths", kind="robustness", version=3, params=PromptLengths, per_class=True, order=70,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="first token across every prefill boundary, a fresh Engine per length")
def request(ctx, p: PromptLengths) -> GateRequest:
    return against_reference(ctx, p)
