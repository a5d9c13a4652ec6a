"""generation_parity: greedy litert-lm output of the bundle against PyTorch greedy on the same ids,
stopping where the source's own generation settings stop (farm_toolchain/gates/generation_parity.py
documents the measurement and every pass rule, and why)."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest, against_reference
from farm_common.gate_params import GenerationParity


@GATES.register("generation_parity", kind="parity", version=3, params=GenerationParity, per_class=True, order=20,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="greedy output of the bundle in litert-lm vs PyTorch greedy, stop reason included")
def request(ctx, p: GenerationParity) -> GateRequest:
    return against_reference(ctx, p)
