"""Qwen3 dense decoders: GQA attention with RMSNorm on q and k (QK-norm), ChatML turns. litert-torch
0.10.0 has a model extension for them (model_ext/qwen3); the builder writes `qwen3` metadata."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("qwen3")
class Qwen3(Family):
    architectures = frozenset({"Qwen3ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|im_end|>"
    llm_model_type = "qwen3"
