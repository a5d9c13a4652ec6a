"""second_turn_parity: the second reply of a two-turn conversation through litert-lm against
PyTorch's on the sequence the runtime feeds, with the cause named when the runtime's reply is what PyTorch says
with the previous answer's stop token given a zero embedding (the seeds' LiteRT-LM 0.18.1 defect on
bundles that take their prompt as embeddings, issue 21). Image bundles (the ones with an embedder
section); the text build of the same source is its control in tests/integration/test_vision.py."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateParams, GateRequest, image_turns_against_reference


class SecondTurnParity(GateParams):
    # Two user turns on one Conversation; the second reply against PyTorch's on the whole history.
    # The tiny Gemma 3 VL answers the first briefly (a stop token to carry over) and the second at
    # length (a reply the carried token can change).
    turns: list[str] = Field(default_factory=lambda: ["Hello", "Who are you?"], min_length=2, max_length=2)
    max_tokens: int = Field(16, ge=1)


def card_line(second, where: str) -> str | None:
    # Only a failure is a line of its own: the pitfall, as measured.
    if second and second["status"] == "fail" and second.get("findings"):
        return f"- Pitfall, measured ({where}): {second['findings'][0]}."
    return None


def card_pitfall(second) -> str | None:
    # The defect as the gate found it, cause named: a failure with its finding.
    return second["findings"][0] if second["status"] == "fail" and second.get("findings") else None


@GATES.register("second_turn_parity", kind="parity", version=1, params=SecondTurnParity, per_class=True, order=23,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"), card_section="image_input",
                card_line=card_line, card_pitfall=card_pitfall,
                description="a second turn's reply vs PyTorch on the whole history (the stop-token embedding check)")
def request(ctx, p: SecondTurnParity) -> GateRequest | None:
    return image_turns_against_reference(ctx, p)
