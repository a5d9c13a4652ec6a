"""Gemma 3 text decoders (Gemma3ForCausalLM: 270M, 1B): sliding-window and global attention
layers, tied embeddings, a 262k SentencePiece vocabulary. litert-torch's export_hf exports them
(model_ext/gemma3: its RMSNorm with the +1 weight offset and the fused MLP); no recurrent state."""

from farm.families.base import FAMILIES, Family
from farm.families.tiny import GEMMA, tiny_spec


@FAMILIES.register("gemma3")
class Gemma3(Family):
    architectures = frozenset({"Gemma3ForCausalLM"})
    layers = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    end_of_turn = "<end_of_turn>"
    llm_model_type = "gemma3"
    tiny = tiny_spec("Gemma3TextConfig", "Gemma3ForCausalLM", GEMMA, head_dim=16, query_pre_attn_scalar=16,
                sliding_window=16, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                tie_word_embeddings=True)
