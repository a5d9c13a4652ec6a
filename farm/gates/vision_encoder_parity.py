"""vision_encoder_parity: the bundle's vision encoder section, and the float export's encoder, fed
the pixels litert-lm gives them, against PyTorch's vision tower fed its own processor's pixels:
per-patch correlation and max difference on the shipped images (issue 21)."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest
from farm_common.gate_params import VisionEncoderParity


@GATES.register("vision_encoder_parity", kind="parity", version=1, params=VisionEncoderParity, per_class=True, order=21,
                sections=("TFLiteModel",),
                description="the vision encoder (float and at its recipe) vs PyTorch's tower, per patch")
def request(ctx, p: VisionEncoderParity) -> GateRequest | None:
    if not ctx.image:
        return None  # a text bundle: no encoder
    inputs = {"bundle_path": "bundle", "model_dir": "reference"}
    if ctx.identity("float_vision_encoder"):
        inputs["float_encoder_path"] = "float_vision_encoder"
    return GateRequest(inputs=inputs, args=p.model_dump())
