"""Gemma 4 text decoders: sliding-window and global attention layers, per-layer input embeddings,
tied embeddings, Gemma's `<start_of_turn>` turns. litert-torch 0.10.0 has a model extension
(model_ext/gemma4) and the builder's `gemma4` model type (its absence gave `generic_model` metadata
the runtime rejected: litert-torch #1005)."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("gemma4")
class Gemma4(Family):
    architectures = frozenset({"Gemma4ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<end_of_turn>"
    llm_model_type = "gemma4"
