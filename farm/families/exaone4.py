"""LG EXAONE 4 decoders: sliding-window and global attention (global layers without rotary
embeddings), QK-norm, post-norms, `[|user|]…[|endofturn|]` turns; exported through litert-torch's
generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import tiny_spec, turn_template


EXAONE = (("[PAD]", "[|user|]", "[|assistant|]", "[|system|]", "[|endofturn|]"), "[|endofturn|]",
          turn_template("[|user|]", "[|assistant|]", "[|system|]", "[|endofturn|]\n", "[|assistant|]"))


@FAMILIES.register("exaone4")
class Exaone4(Family):
    architectures = frozenset({"Exaone4ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "[|endofturn|]"
    tiny = tiny_spec("Exaone4Config", "Exaone4ForCausalLM", EXAONE, sliding_window=16,
                layer_types=["sliding_attention"] * 3 + ["full_attention"], tie_word_embeddings=False)
