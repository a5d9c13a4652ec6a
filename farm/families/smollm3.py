"""SmolLM3 decoders: Llama-style GQA attention with rotary embeddings left out of every few layers
(NoPE), tied embeddings, ChatML turns; exported through litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("smollm3")
class SmolLM3(Family):
    architectures = frozenset({"SmolLM3ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|im_end|>"
