"""prompt_lengths: the first token across every prefill boundary, a fresh Engine per length, against
PyTorch; near-ties by an absolute logit margin, and the first token's log-probability gated."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest, against_reference
from farm_common.gate_params import PromptLengths


@GATES.register("prompt_lengths", kind="robustness", version=3, params=PromptLengths, per_class=True, order=70,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="first token across every prefill boundary, a fresh Engine per length")
def request(ctx, p: PromptLengths) -> GateRequest:
    return against_reference(ctx, p)
