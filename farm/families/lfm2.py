"""Liquid LFM2 decoders: gated short-convolution blocks interleaved with GQA attention, ChatML turns.
litert-torch 0.10.0 has a model extension (model_ext/lfm2) and the builder's `lfm2` model type; the
convolutions carry state between calls."""

from farm.families.base import FAMILIES, Family, KnownFailure
from farm.families.tiny import tiny_spec


@FAMILIES.register("lfm2")
class Lfm2(Family):
    architectures = frozenset({"Lfm2ForCausalLM"})
    layers = frozenset({"q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"})
    end_of_turn = "<|im_end|>"
    llm_model_type = "lfm2"
    known_failures = (
        KnownFailure("convert", "litert-torch", frozenset({"0.10.0"}),
                     "export: AttributeError: 'NoneType' object has no attribute 'layers' (litert-torch's "
                     "model_ext/lfm2/short_conv.py:75 reads past_key_values.layers, which transformers 5.24 "
                     "leaves None while tracing)",
                     "2026-12-06, `farm families --build`, tiny-lfm2 at float32 and int8"),
    )
    tiny = tiny_spec("Lfm2Config", "Lfm2ForCausalLM", layer_types=["conv", "full_attention", "conv", "full_attention"],
                full_attn_idxs=[1, 3], tie_word_embeddings=True)
