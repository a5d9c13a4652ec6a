"""Llama-style decoders (Llama, SmolLM2): plain KV-cache attention, no recurrent state."""

from farm.families.base import FAMILIES, Family


@FAMILIES.register("llama")
class Llama(Family):
    architectures = frozenset({"LlamaForCausalLM"})
    layers = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    end_of_turn = "<|im_end|>"
