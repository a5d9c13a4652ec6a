"""text_turn_equality: a text-only turn on an image bundle equals the text build's (the same source
and recipe, found in lineage), question by question (issue 21). An image bundle without a text
build on record has nothing to compare with (its card says no text build was compared)."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest
from farm_common.gate_params import TextTurnEquality


@GATES.register("text_turn_equality", kind="parity", version=1, params=TextTurnEquality, per_class=True, order=24,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="text-only turns on the image bundle vs the text build of the same source and recipe")
def request(ctx, p: TextTurnEquality) -> GateRequest | None:
    if not ctx.image or not ctx.identity("text_twin"):
        return None
    return GateRequest(inputs={"bundle_path": "bundle", "text_bundle_path": "text_twin"}, args=p.model_dump())
