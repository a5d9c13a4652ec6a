"""Llama-style decoders (Llama, SmolLM2): plain KV-cache attention, no recurrent state."""

from farm.families.base import FAMILIES, Family
from farm.families.tiny import tiny_spec


@FAMILIES.register("llama")
class Llama(Family):
    architectures = frozenset({"LlamaForCausalLM"})
    layers = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    end_of_turn = "<|im_end|>"
    tiny = tiny_spec("LlamaConfig", "LlamaForCausalLM", small=False, hidden_size=64, intermediate_size=128,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=512, tie_word_embeddings=False)
