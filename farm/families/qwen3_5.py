"""Qwen3.5: GatedDeltaNet linear-attention blocks interleaved with gated full attention."""

from types import MappingProxyType

from farm.families.base import FAMILIES, LAYER, Family, GroupPattern
from farm.families.tiny import tiny_spec


@FAMILIES.register("qwen3_5")
class Qwen3_5(Family):
    architectures = frozenset({"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"})
    # Builtin ops instead of the fused `gated_delta_update` custom op: measured with litert-torch
    # 0.10.0 / litert-lm 0.18.1, the fused op's greedy output differs from PyTorch when the
    # linear-attention layers have fewer key heads than value heads (the runtime kernel takes
    # its head count from q and never expands q/k to the value heads: docs/findings.md), and
    # the plain LiteRT interpreter cannot run the custom op at all (logits parity needs it).
    # Lightweight conversion (constants as resources the converter does not copy): measured on
    # Qwen3.5-0.8B's full shape (benchmarks/README.md "Conversion memory"), the export's peak falls
    # from 10.4 to 3.9 GiB and its time from 287 to 190 s; the float export's bytes differ (constants
    # the converter no longer folds) but its logits are identical on the same inputs, and a tiny
    # Qwen3.5's export is byte for byte the same.
    export_defaults = MappingProxyType({"use_fused_gdn": False, "experimental_lightweight_conversion": True})
    layers = frozenset({"in_proj_a", "in_proj_b", "in_proj_qkv", "in_proj_z", "out_proj"})
    recurrent_state = True
    end_of_turn = "<|im_end|>"
    llm_model_type = "qwen3"
    # GatedDeltaNet's projections as two groups of their own: the decay and write-strength gates
    # (in_proj_a, in_proj_b: tiny, feeding the recurrent state at every token; their scopes also
    # carry in_proj_qkv's name, hence the anchored regex, as in recipes/qwen35_wi8_float_gates.yaml)
    # and the rest of the block (in_proj_qkv, in_proj_z, out_proj).
    own_groups = (
        GroupPattern("layer{layer}.gdn_gates", "FULLY_CONNECTED",
                     LAYER + r"[^/;]*_linear_attn/[^/;]*Linear_in_proj_[ab](?![A-Za-z0-9_])",
                     "one GatedDeltaNet layer's decay and beta projections (in_proj_a, in_proj_b)"),
        GroupPattern("layer{layer}.gdn", "FULLY_CONNECTED", LAYER + r"[^/;]*_linear_attn[/;]",
                     "one GatedDeltaNet layer's qkv, z and output projections"),
    )
    tiny = tiny_spec(
        "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", small=False,
        hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16,
        # Equal key/value head counts: 2 key / 4 value heads breaks the fused GDN export
        # (litert-lm output differs from PyTorch).
        linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, max_position_embeddings=512, tie_word_embeddings=False,
        layer_pattern=("linear_attention", "full_attention"),
        warn_if_unequal=("linear_num_key_heads", "linear_num_value_heads",
                         "the fused GDN export is known to diverge from PyTorch for such models "
                         "(export with use_fused_gdn=false)"))
