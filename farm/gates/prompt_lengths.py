"""prompt_lengths: the first token across every prefill boundary, a fresh Engine per length, against
PyTorch; near-ties by an absolute logit margin, and the first token's log-probability gated."""

from __future__ import annotations

from pydantic import Field

from farm.gates import GateParams, GateRequest, register


class Params(GateParams):
    max_cases: int = Field(48, ge=1)
    # Absolute, in logits (the same meaning as generation_parity's tie_margin).
    tie_margin: float = Field(0.01, ge=0)
    # |runtime - PyTorch| log-probability of PyTorch's first token, in nats (measured: int8 moves a
    # token by up to 0.7 nats on SmolLM2-135M, 0.09 on the tiny Qwen3.5).
    max_logprob_diff: float = Field(1.0, gt=0)


@register("prompt_lengths", kind="robustness", version=2, params=Params,
          sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
          description="first token across every prefill boundary, a fresh Engine per length")
def request(ctx, p: Params) -> GateRequest:
    return GateRequest(inputs={"bundle_path": "bundle", "model_dir": "reference"},
                       args={**p.model_dump(), "reference_stop_ids": ctx.reference_stop_ids})
