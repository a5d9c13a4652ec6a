"""Qwen2 / Qwen2.5 decoders: GQA attention with biased q/k/v projections, ChatML turns. litert-torch
exports them through its generic path; the builder writes `qwen2p5` model-type metadata."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("qwen2")
class Qwen2(Family):
    architectures = frozenset({"Qwen2ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|im_end|>"
    llm_model_type = "qwen2p5"
