"""image_turn_parity: an image turn through litert-lm (the image attached, the bundle's own chat
template and image contract) against PyTorch through the source's own processor, on images made at
the bundle's image size; and whether the runtime's first token follows the image wherever PyTorch's
does (a swapped image must change it). Runs only on bundles with a vision encoder (issue 21)."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest, against_reference
from farm_common.gate_params import ImageTurnParity


@GATES.register("image_turn_parity", kind="parity", version=1, params=ImageTurnParity, per_class=True, order=22,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="image turns through the runtime vs PyTorch's processor path, and the swap check")
def request(ctx, p: ImageTurnParity) -> GateRequest | None:
    if not ctx.image:
        return None  # a text bundle: no image turn to measure
    return against_reference(ctx, p)
