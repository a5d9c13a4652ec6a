"""OLMo 2 decoders: norms after attention and MLP (not before), QK-norm over the whole projection,
`<|user|>` / `<|assistant|>` turns, the answer ended by `<|endoftext|>`; exported through
litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("olmo2")
class Olmo2(Family):
    architectures = frozenset({"Olmo2ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|endoftext|>"
