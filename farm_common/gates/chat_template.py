"""chat_template: the bundle's chat template, rendered by the runtime, equals transformers'
apply_chat_template with the source tokenizer on system + user, a three-turn exchange, and the
content-parts message form litert-lm passes."""

from __future__ import annotations

from farm_common.gates.registry import GATES, GateRequest, card_text


def card_line(chat, where: str) -> str:
    return f"- Chat template: {card_text((chat.get('findings') or [chat['status']])[0], 300) if chat else 'not measured'}"


@GATES.register("chat_template", kind="metadata", version=1, sections=("LlmMetadataProto",), order=60,
                card_section="usage", card_line=card_line,
                description="the runtime's render of the bundle's chat template vs apply_chat_template")
def request(ctx, p) -> GateRequest:
    return GateRequest(inputs={"bundle_path": "bundle", "model_dir": "reference"})
