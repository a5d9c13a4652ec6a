"""Qwen3 dense decoders: GQA attention with RMSNorm on q and k (QK-norm), ChatML turns. litert-torch
0.10.0 has a model extension for them (model_ext/qwen3); the builder writes `qwen3` metadata."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import tiny_spec


@FAMILIES.register("qwen3")
class Qwen3(Family):
    architectures = frozenset({"Qwen3ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|im_end|>"
    llm_model_type = "qwen3"
    tiny = tiny_spec("Qwen3Config", "Qwen3ForCausalLM", head_dim=16, tie_word_embeddings=True)  # QK-norm
