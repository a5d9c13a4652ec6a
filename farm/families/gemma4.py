"""Gemma 4 text decoders: sliding-window and global attention layers, per-layer input embeddings,
tied embeddings, Gemma's `<start_of_turn>` turns. litert-torch 0.10.0 has a model extension
(model_ext/gemma4) and the builder's `gemma4` model type (its absence gave `generic_model` metadata
the runtime rejected: litert-torch #1005)."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import GEMMA, tiny_spec


@FAMILIES.register("gemma4")
class Gemma4(Family):
    architectures = frozenset({"Gemma4ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<end_of_turn>"
    llm_model_type = "gemma4"
    tiny = tiny_spec("Gemma4TextConfig", "Gemma4ForCausalLM", GEMMA, head_dim=16, sliding_window=16,
                layer_types=["sliding_attention"] * 3 + ["full_attention"], hidden_size_per_layer_input=8,
                per_layer_config={}, tie_word_embeddings=True)
