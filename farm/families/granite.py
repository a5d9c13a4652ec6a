"""IBM Granite 3 decoders: Llama's layers scaled by embedding, residual, attention and logits
multipliers, `<|start_of_role|>…<|end_of_text|>` turns; exported through litert-torch's generic
path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("granite")
class Granite(Family):
    architectures = frozenset({"GraniteForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|end_of_text|>"
