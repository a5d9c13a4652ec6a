"""Liquid LFM2 mixture-of-experts decoders: LFM2's convolution and attention blocks with routed
experts after the first dense layers; the experts exported one by one
(`moe_exports_implementation: litert_moe_sequential`, as for qwen3_moe)."""

from types import MappingProxyType

from farm.families.base import FAMILIES, Family


@FAMILIES.register("lfm2_moe")
class Lfm2Moe(Family):
    architectures = frozenset({"Lfm2MoeForCausalLM"})
    export_defaults = MappingProxyType({"moe_exports_implementation": "litert_moe_sequential"})
    layers = frozenset({"q_proj", "k_proj", "v_proj", "out_proj", "in_proj"})
    end_of_turn = "<|im_end|>"
