"""Ministral decoders: Mistral's attention with sliding-window and full layers interleaved
(`layer_types`), `[INST]` turns; exported through litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("ministral")
class Ministral(Family):
    architectures = frozenset({"MinistralForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "</s>"
