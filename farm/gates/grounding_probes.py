"""grounding_probes: questions about shipped images whose answers are opposite (the seeds' image
with text -> "Yes", without -> "No"), asked through litert-lm with the image attached; trained image
models only (a config section enables it). On a random tiny model the swap check of
image_turn_parity is what shows an answer follows its image."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest, against_reference
from farm_common.gate_params import GroundingProbes


@GATES.register("grounding_probes", kind="quality", version=1, params=GroundingProbes, optional=True, per_class=True, order=31,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="opposite questions about shipped images (text -> yes, none -> no), the image attached")
def request(ctx, p: GroundingProbes) -> GateRequest | None:
    if not ctx.image:
        return None
    return against_reference(ctx, p)
