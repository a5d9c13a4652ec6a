"""text_turn_equality: a text-only turn on an image bundle equals the text build's (the same source
and recipe, found in lineage), question by question (issue 21). An image bundle without a text
build on record has nothing to compare with (its card says no text build was compared)."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateRequest, GateParams


class TextTurnEquality(GateParams):
    # Text-only questions asked of the image bundle and of the text build of the same source and
    # recipe, one fresh Engine each, through their own chat templates.
    prompts: list[str] = Field(default_factory=lambda: ["Hello", "What is 2 + 3?", "Tell me about cats."],
                               min_length=1)
    max_tokens: int = Field(16, ge=1)


def card_line(equal, where: str) -> str | None:
    if equal is None:
        return None
    m = equal.get("metrics") or {}
    return f"- Text turns ({equal['status']}): {m.get('same')} of {m.get('prompts')} replies equal the text build's ({where})."


@GATES.register("text_turn_equality", kind="parity", version=1, params=TextTurnEquality, per_class=True, order=24,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"), card_section="image_input",
                card_line=card_line,
                description="text-only turns on the image bundle vs the text build of the same source and recipe")
def request(ctx, p: TextTurnEquality) -> GateRequest | None:
    if not ctx.image or not ctx.identity("text_twin"):
        return None
    return GateRequest(inputs={"bundle_path": "bundle", "text_bundle_path": "text_twin"}, args=p.model_dump())
