"""SmolLM3 decoders: Llama-style GQA attention with rotary embeddings left out of every few layers
(NoPE), tied embeddings, ChatML turns; exported through litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import tiny_spec


@FAMILIES.register("smollm3")
class SmolLM3(Family):
    architectures = frozenset({"SmolLM3ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|im_end|>"
    tiny = tiny_spec("SmolLM3Config", "SmolLM3ForCausalLM", no_rope_layer_interval=2,  # every 2nd layer NoPE
                tie_word_embeddings=True)
