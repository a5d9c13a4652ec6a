"""LG EXAONE 4 decoders: sliding-window and global attention (global layers without rotary
embeddings), QK-norm, post-norms, `[|user|]…[|endofturn|]` turns; exported through litert-torch's
generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family


@FAMILIES.register("exaone4")
class Exaone4(Family):
    architectures = frozenset({"Exaone4ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "[|endofturn|]"
