"""Liquid LFM2 mixture-of-experts decoders: LFM2's convolution and attention blocks with routed
experts after the first dense layers; the experts exported one by one
(`moe_exports_implementation: litert_moe_sequential`, as for qwen3_moe)."""

from types import MappingProxyType

from farm.families.base import FAMILIES, Family, KnownFailure
from farm.families.tiny import tiny_spec


@FAMILIES.register("lfm2_moe")
class Lfm2Moe(Family):
    architectures = frozenset({"Lfm2MoeForCausalLM"})
    export_defaults = MappingProxyType({"moe_exports_implementation": "litert_moe_sequential"})
    layers = frozenset({"q_proj", "k_proj", "v_proj", "out_proj", "in_proj"})
    end_of_turn = "<|im_end|>"
    known_failures = (
        KnownFailure("convert", "litert-torch", frozenset({"0.10.0"}),
                     "export: RuntimeError: Attempting to broadcast a dimension of length 2 at -1 (torch.Size([1, "
                     "64, 2]) against [1, 64, 8], in transformers 5.24's modeling_lfm2_moe.py:465 under litert-torch's "
                     "generic export: litert-torch has no lfm2_moe extension)",
                     "2026-12-06, `farm families --build`, tiny-lfm2_moe at float32 and int8"),
    )
    tiny = tiny_spec("Lfm2MoeConfig", "Lfm2MoeForCausalLM", layer_types=["conv", "full_attention", "conv", "full_attention"],
                num_dense_layers=1, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                tie_word_embeddings=True)
