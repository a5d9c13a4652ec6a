"""Mistral decoders: GQA attention over a sliding window, `[INST] … [/INST]` turns, the answer ended
by `</s>`; exported through litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("mistral")
class Mistral(Family):
    architectures = frozenset({"MistralForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "</s>"
