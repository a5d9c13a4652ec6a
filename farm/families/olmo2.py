"""OLMo 2 decoders: norms after attention and MLP (not before), QK-norm over the whole projection,
`<|user|>` / `<|assistant|>` turns, the answer ended by `<|endoftext|>`; exported through
litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import tiny_spec, turn_template


OLMO2 = (("<|pad|>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>"), "<|endoftext|>",
         turn_template("<|user|>\n", "<|assistant|>\n", "<|system|>\n", "\n", "<|assistant|>\n",
                       assistant_close="<|endoftext|>\n"))


@FAMILIES.register("olmo2")
class Olmo2(Family):
    architectures = frozenset({"Olmo2ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|endoftext|>"
    tiny = tiny_spec("Olmo2Config", "Olmo2ForCausalLM", OLMO2, tie_word_embeddings=False)  # post-norms, QK-norm
