"""image_turn_parity: an image turn through litert-lm (the image attached, the bundle's own chat
template and image contract) against PyTorch through the source's own processor, on images made at
the bundle's image size; and whether the runtime's first token follows the image wherever PyTorch's
does (a swapped image must change it). Runs only on bundles with a vision encoder (issue 21)."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateParams, GateRequest, image_turns_against_reference


class ImageTurnParity(GateParams):
    # Each shipped image (made at the bundle's image size: shapes, text drawn in, noise) asked with
    # this prompt through litert-lm with the image attached, against PyTorch through the source's
    # own processor. Defaults: the tiny Gemma 3 VL matched 3 of 3 token for token with the
    # processor's normalization in the encoder's graph, 0 of 3 without it.
    prompt: str = "What is in this image?"
    max_tokens: int = Field(12, ge=1)
    # The fraction of images whose reply must equal PyTorch's, token for token.
    min_exact_fraction: float = Field(1.0, ge=0, le=1)


def card_line(turns, where: str) -> str | None:
    if turns is None:
        return None
    m = turns.get("metrics") or {}
    return (f"- Image turns through litert-lm {turns.get('runtime_version')} ({turns['status']}): "
            f"{m.get('exact')} of {m.get('images')} replies are PyTorch's token for token (its prefill "
            f"attends causally within the image, as the exported graph does); {m.get('own_path_exact')} of "
            f"{m.get('images')} equal the model's own path, whose image tokens see each other, which no "
            f"litert-lm prefill can do ({where}).")


def card_pitfall(turns) -> str | None:
    # How far the runtime's causal prefill over the image moves replies from the model's own path.
    m = turns.get("metrics") or {}
    if m.get("own_path_exact") is None or m["own_path_exact"] >= (m.get("images") or 0):
        return None
    return (f"The runtime's prefill attends causally within an image; the model's own path lets its image tokens "
            f"see each other: {m['own_path_exact']} of {m['images']} image turns equal that path "
            f"(litert-lm {turns.get('runtime_version')}).")


@GATES.register("image_turn_parity", kind="parity", version=1, params=ImageTurnParity, per_class=True, order=22,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"), card_section="image_input",
                card_line=card_line, card_pitfall=card_pitfall,
                description="image turns through the runtime vs PyTorch's processor path, and the swap check")
def request(ctx, p: ImageTurnParity) -> GateRequest | None:
    return image_turns_against_reference(ctx, p)
