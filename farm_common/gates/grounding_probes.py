"""grounding_probes: questions about shipped images whose answers are opposite (the seeds' image
with text -> "Yes", without -> "No"), asked through litert-lm with the image attached; trained image
models only (a config section enables it). On a random tiny model the swap check of
image_turn_parity is what shows an answer follows its image."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from farm_common.gates.registry import GATES, GateParams, GateRequest, image_turns_against_reference


class GroundingProbe(GateParams):
    # One of the shipped images (farm_toolchain/gates/images.py): "text" (words drawn in white on
    # black), "shapes" (colored shapes, no text), "noise".
    image: Literal["text", "shapes", "noise"]
    prompt: str = Field(min_length=1)
    expect: str = Field(min_length=1)  # a regex the reply must match (case-insensitive)


class GroundingProbes(GateParams):
    # The seeds' two opposite probes: an image with text -> "Yes", one without -> "No" (trained
    # models only: a config enables the gate with `gates.grounding_probes: {}`).
    probes: list[GroundingProbe] = Field(default_factory=lambda: [
        GroundingProbe(image="text", prompt="Does this image contain text? Answer yes or no.", expect=r"^\W*yes"),
        GroundingProbe(image="shapes", prompt="Does this image contain text? Answer yes or no.", expect=r"^\W*no"),
    ], min_length=1)
    max_tokens: int = Field(16, ge=1)


@GATES.register("grounding_probes", kind="quality", version=1, params=GroundingProbes, optional=True, per_class=True, order=31,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="opposite questions about shipped images (text -> yes, none -> no), the image attached")
def request(ctx, p: GroundingProbes) -> GateRequest | None:
    return image_turns_against_reference(ctx, p)
