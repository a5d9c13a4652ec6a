"""IBM Granite 3 decoders: Llama's layers scaled by embedding, residual, attention and logits
multipliers, `<|start_of_role|>…<|end_of_text|>` turns; exported through litert-torch's generic
path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import tiny_spec, turn_template


GRANITE = (("<|pad|>", "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"), "<|end_of_text|>",
           turn_template("<|start_of_role|>user<|end_of_role|>", "<|start_of_role|>assistant<|end_of_role|>",
                         "<|start_of_role|>system<|end_of_role|>", "<|end_of_text|>\n",
                         "<|start_of_role|>assistant<|end_of_role|>"))


@FAMILIES.register("granite")
class Granite(Family):
    architectures = frozenset({"GraniteForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|end_of_text|>"
    tiny = tiny_spec("GraniteConfig", "GraniteForCausalLM", GRANITE, embedding_multiplier=12.0, residual_multiplier=0.22,
                attention_multiplier=0.0078125, logits_scaling=8.0, tie_word_embeddings=True)
