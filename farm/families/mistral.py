"""Mistral decoders: GQA attention over a sliding window, `[INST] … [/INST]` turns, the answer ended
by `</s>`; exported through litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import tiny_spec, turn_template


MISTRAL = (("<unk>", "<s>", "</s>", "[INST]", "[/INST]"), "</s>",
           turn_template("[INST] ", "", "[INST] ", " [/INST]", "", assistant_close="</s>"))


@FAMILIES.register("mistral")
class Mistral(Family):
    architectures = frozenset({"MistralForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "</s>"
    tiny = tiny_spec("MistralConfig", "MistralForCausalLM", MISTRAL, head_dim=16, sliding_window=32,
                tie_word_embeddings=False)
