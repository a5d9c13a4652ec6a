"""metadata: stop tokens include the end-of-turn token and the source's end-of-sequence ids and none is
only whitespace, the LLM metadata's model type is the family's, executor
metadata for recurrent-state families, and the tokenizer section == the source tokenizer.json."""

from __future__ import annotations

from farm_common.gates.registry import GATES, GateRequest


@GATES.register("metadata", kind="metadata", version=3, order=100,
                sections=("LlmMetadataProto", "ExecutorMetadataProto", "HF_Tokenizer_Zlib"),
                description="stop tokens (end of turn, none blank), model type, executor metadata, tokenizer section == source tokenizer.json")
def request(ctx, p) -> GateRequest:
    family = ctx.family
    return GateRequest(
        inputs={"bundle_path": "bundle", **({"tokenizer_json": "tokenizer"} if ctx.tokenizer_sha else {})},
        args={"end_of_turn": family.end_of_turn if family else None,
              "recurrent_state": bool(family and family.recurrent_state),
              # An image bundle's type is the one that carries its image markers (Gemma 3: gemma3n).
              "llm_model_type": ((family.image_llm_model_type if ctx.image else family.llm_model_type)
                                 if family else None),
              "reference_stop_ids": ctx.reference_stop_ids},
    )
