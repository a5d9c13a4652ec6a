"""Gemma 3 with its vision tower (Gemma3ForConditionalGeneration: 4B and up; the tiny one made
locally): the Gemma 3 decoder behind an external embedder, and litert-torch 0.10.0's vision export
of its SigLIP tower (model_ext/gemma3/vision_exportable.py) and projector. The runtime reads the
image markers and size from the gemma3n LlmModelType (what litert-torch's Gemma 3 metadata builder
writes for an image export). A config with `vision:` builds the image bundle; without it, the text
decoder alone (the same source, a decoder that takes token ids)."""

from farm.families.base import FAMILIES, Family, KnownFailure, LLAMA_LAYERS


@FAMILIES.register("gemma3_vl")
class Gemma3Vl(Family):
    architectures = frozenset({"Gemma3ForConditionalGeneration"})
    layers = LLAMA_LAYERS
    end_of_turn = "<end_of_turn>"
    llm_model_type = "gemma3"
    vision = True
    image_llm_model_type = "gemma3n"
    known_failures = (
        KnownFailure("second_turn_parity", "litert-lm", frozenset({"0.18.1"}),
                     "the previous answer's stop token gets a zero embedding when the prompt is taken as "
                     "embeddings (an image bundle's embedder section): the second reply is PyTorch's with that "
                     "embedding zeroed; the text build of the same source matches PyTorch",
                     "2026-12-06, tiny-gemma3_vl float32, tests/integration/test_vision.py"),
    )
