"""Ministral decoders: Mistral's attention with sliding-window and full layers interleaved
(`layer_types`), `[INST]` turns; exported through litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.mistral import MISTRAL
from farm.families.tiny import tiny_spec


@FAMILIES.register("ministral")
class Ministral(Family):
    architectures = frozenset({"MinistralForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "</s>"
    tiny = tiny_spec("MinistralConfig", "MinistralForCausalLM", MISTRAL, head_dim=16, sliding_window=32,
                layer_types=["sliding_attention", "full_attention"] * 2, tie_word_embeddings=False)
