"""Cohere Command R7B / Command A decoders (Cohere2): parallel attention and MLP off one LayerNorm,
sliding-window layers with a global one every few, tied embeddings, `<|START_OF_TURN_TOKEN|>` turns;
exported through litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("cohere2")
class Cohere2(Family):
    architectures = frozenset({"Cohere2ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|END_OF_TURN_TOKEN|>"
