"""Phi-3 / Phi-4-mini decoders: fused qkv and gate-up projections, `<|user|>…<|end|>` turns; exported
through litert-torch's generic path."""

from farm.families.base import FAMILIES, Family
from farm.families.tiny import tiny_spec, turn_template


PHI3 = (("<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"), "<|end|>",
        turn_template("<|user|>\n", "<|assistant|>\n", "<|system|>\n", "<|end|>\n", "<|assistant|>\n"))


@FAMILIES.register("phi3")
class Phi3(Family):
    architectures = frozenset({"Phi3ForCausalLM"})
    layers = frozenset({"qkv_proj", "o_proj", "gate_up_proj", "down_proj"})
    end_of_turn = "<|end|>"
    tiny = tiny_spec("Phi3Config", "Phi3ForCausalLM", PHI3, tie_word_embeddings=False)  # fused qkv, gate_up
