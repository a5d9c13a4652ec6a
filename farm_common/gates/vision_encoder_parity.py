"""vision_encoder_parity: the bundle's vision encoder section, and the float export's encoder, fed
the pixels litert-lm gives them, against PyTorch's vision tower fed its own processor's pixels:
per-patch correlation and max difference on the shipped images (issue 21)."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateRequest, GateParams


class VisionEncoderParity(GateParams):
    # Per-patch Pearson correlation (over the hidden size) of the encoder's output against PyTorch's
    # vision tower on the shipped images, the smallest patch's. The float export must be the
    # tower (the seeds: 0.9999999999 in fp32); the bundle's encoder may move by its recipe (the
    # seeds' int8 tower held 0.9916-0.9951 on real photographs, their 2B's 0.974-0.984).
    float_min_correlation: float = Field(0.99999, ge=0, le=1)
    min_correlation: float = Field(0.99, ge=0, le=1)


def card_line(enc, where: str) -> str | None:
    if enc is None:
        return None
    m = enc.get("metrics") or {}
    return (f"- Vision encoder vs PyTorch's tower ({enc['status']}, {m.get('images')} shipped images, "
            f"{m.get('patches')} patches): per-patch correlation min "
            f"{m.get('bundle_min_correlation', float('nan')):.10f} at its recipe"
            + (f", {m['float_min_correlation']:.10f} float" if "float_min_correlation" in m else "")
            + f"; max |diff| {m.get('bundle_max_abs_diff', float('nan')):.3g} ({where}).")


@GATES.register("vision_encoder_parity", kind="parity", version=1, params=VisionEncoderParity, per_class=True, order=21,
                sections=("TFLiteModel",), card_section="image_input", card_line=card_line,
                description="the vision encoder (float and at its recipe) vs PyTorch's tower, per patch")
def request(ctx, p: VisionEncoderParity) -> GateRequest | None:
    if not ctx.image:
        return None  # a text bundle: no encoder
    inputs = {"bundle_path": "bundle", "model_dir": "reference"}
    if ctx.identity("float_vision_encoder"):
        inputs["float_encoder_path"] = "float_vision_encoder"
    return GateRequest(inputs=inputs, args=p.model_dump())
