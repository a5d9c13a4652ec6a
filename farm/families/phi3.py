"""Phi-3 / Phi-4-mini decoders: fused qkv and gate-up projections, `<|user|>…<|end|>` turns; exported
through litert-torch's generic path."""

from farm.families.base import FAMILIES, Family


@FAMILIES.register("phi3")
class Phi3(Family):
    architectures = frozenset({"Phi3ForCausalLM"})
    layers = frozenset({"qkv_proj", "o_proj", "gate_up_proj", "down_proj"})
    end_of_turn = "<|end|>"
