"""Gemma 3 with its vision tower (Gemma3ForConditionalGeneration: 4B and up; the tiny one made
locally): the Gemma 3 decoder behind an external embedder, and litert-torch 0.10.0's vision export
of its SigLIP tower (model_ext/gemma3/vision_exportable.py) and projector. The runtime reads the
image markers and size from the gemma3n LlmModelType (what litert-torch's Gemma 3 metadata builder
writes for an image export). A config with `vision:` builds the image bundle; without it, the text
decoder alone (the same source, a decoder that takes token ids)."""

from types import MappingProxyType

from farm.families.base import FAMILIES, Family, KnownFailure, LLAMA_LAYERS
from farm.families.tiny import GEMMA, tiny_spec, turn_template


# Gemma 3's chat format with its image markers: an image part renders as <start_of_image>, which the
# processor (and litert-lm) expand to the image's soft tokens between <start_of_image> and <end_of_image>.
IMAGE_MARKERS = ("<start_of_image>", "<end_of_image>", "<image_soft_token>")
GEMMA_VL = (GEMMA[0] + IMAGE_MARKERS, "<end_of_turn>",
            turn_template("<start_of_turn>user\n", "<start_of_turn>model\n", "<start_of_turn>user\n",
                          "<end_of_turn>\n", "<start_of_turn>model\n", image="<start_of_image>"))


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
    # Gemma 3 with its SigLIP vision tower and projector (issue 21): the text decoder of gemma3, a
    # 2-layer ViT over 64x64 images in 8x8 patches (64 patches, pooled 2x2 by the projector into 16
    # soft tokens), Gemma's image markers as special tokens, and an image processor config.
    tiny = tiny_spec("Gemma3TextConfig", "Gemma3ForConditionalGeneration", GEMMA_VL, head_dim=16,
                query_pre_attn_scalar=16, sliding_window=16, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                tie_word_embeddings=True,
                vision={"config_class": "SiglipVisionConfig", "hidden_size": 32, "intermediate_size": 64,
                        "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 64, "patch_size": 8,
                        "vision_use_head": False},
                mm_tokens_per_image=16, image_markers=IMAGE_MARKERS)
    matrix_export = MappingProxyType({"prefill_lengths": [32], "cache_length": 128})
    matrix_extra = MappingProxyType({"vision": {"recipe": "float32"}, "card": {"task": "image-text-to-text"}})
