"""Qwen3 mixture-of-experts decoders: QK-norm attention, a routed MLP of experts in every layer.

transformers 5's grouped experts lower to `aten.histc`, which litert-torch 0.10.0 has no lowering
for (measured: "Lowering not found: aten.histc.default" with the default export); litert-torch's own
`moe_exports_implementation: litert_moe_sequential` routes the experts one by one in plain ops and
exports, so it is this family's default."""

from types import MappingProxyType

from farm.families.base import FAMILIES, Family
from farm.families.tiny import tiny_spec


@FAMILIES.register("qwen3_moe")
class Qwen3Moe(Family):
    architectures = frozenset({"Qwen3MoeForCausalLM"})
    export_defaults = MappingProxyType({"moe_exports_implementation": "litert_moe_sequential"})
    layers = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate"})
    end_of_turn = "<|im_end|>"
    tiny = tiny_spec("Qwen3MoeConfig", "Qwen3MoeForCausalLM", head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                moe_intermediate_size=32, norm_topk_prob=True, tie_word_embeddings=False)
