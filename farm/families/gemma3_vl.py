"""Gemma 3 with its vision tower (Gemma3ForConditionalGeneration: 4B and up; the tiny one made
locally): the Gemma 3 decoder behind an external embedder, and litert-torch 0.10.0's vision export
of its SigLIP tower (model_ext/gemma3/vision_exportable.py) and projector. The runtime reads the
image markers and size from the gemma3n LlmModelType (what litert-torch's Gemma 3 metadata builder
writes for an image export). A config with `vision:` builds the image bundle; without it, the text
decoder alone."""

from farm.families.base import FAMILIES, Family, LLAMA_LAYERS


@FAMILIES.register("gemma3_vl")
class Gemma3Vl(Family):
    architectures = frozenset({"Gemma3ForConditionalGeneration"})
    layers = LLAMA_LAYERS
    end_of_turn = "<end_of_turn>"
    llm_model_type = "gemma3"
    vision = True
    image_llm_model_type = "gemma3n"
