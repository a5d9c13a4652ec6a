"""Liquid LFM2 decoders: gated short-convolution blocks interleaved with GQA attention, ChatML turns.
litert-torch 0.10.0 has a model extension (model_ext/lfm2) and the builder's `lfm2` model type; the
convolutions carry state between calls."""

from farm.families.base import FAMILIES, Family


@FAMILIES.register("lfm2")
class Lfm2(Family):
    architectures = frozenset({"Lfm2ForCausalLM"})
    layers = frozenset({"q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"})
    end_of_turn = "<|im_end|>"
    llm_model_type = "lfm2"
