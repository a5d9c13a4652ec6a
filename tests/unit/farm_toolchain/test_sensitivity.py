"""The pure parts of the sensitivity measurement (farm_toolchain/sensitivity.py): op groups from the
family's patterns, the order their rules go into a recipe, the held-out windows, and the int4/int2
unpacking of a quantized weight."""

from __future__ import annotations

import re

import numpy as np
import pytest

from farm.families import get_family
from farm_toolchain import tflite
from farm_toolchain.protocol import BadInput
from farm_toolchain.sensitivity import assign_groups, recipe_order, windows_of

PREFIX = "m.LlamaForCausalLM_model/m.LlamaModel_model/m.LlamaDecoderLayer_{}/"


def _op(kind: str, scope: str, buffer: int) -> dict:
    return {"type": kind, "scope": scope, "key": (0, (scope.encode(),)), "weights": [{"buffer": buffer}]}


def _patterns(family: str) -> list[dict]:
    out = []
    for p in get_family(family).groups:
        rx = re.compile(p.regex)
        out.append({**p.request(), "rx": rx, "per_layer": "layer" in rx.groupindex})
    return out


def test_llama_ops_fall_into_embedding_lm_head_and_each_layers_attention_and_mlp():
    ops = [_op("EMBEDDING_LOOKUP", "m.Embedding_embed_tokens;2;", 1)]
    for layer in (0, 1, 11):
        base = PREFIX.format(layer)
        ops += [_op("FULLY_CONNECTED", base + "m.LlamaAttention_self_attn/m.Linear_q_proj;2;", 10 + layer),
                _op("FULLY_CONNECTED", base + "m.LlamaMLP_mlp/m.Linear_gate_proj;1;", 40 + layer)]
    ops.append(_op("FULLY_CONNECTED", "decode_logits_output;", 1))  # tied: the embedding's buffer
    ops.append(_op("DEPTHWISE_CONV_2D", "something_else;", 99))
    groups, ungrouped = assign_groups(ops, _patterns("llama"))
    assert set(groups) == {"embedding", "lm_head", "layer0.attention", "layer0.mlp", "layer1.attention", "layer1.mlp",
                           "layer11.attention", "layer11.mlp"}
    assert groups["layer1.mlp"]["regex"] == r"DecoderLayer_1/[^/;]*_mlp[/;]"
    # A layer's regex matches its own ops and not layer 11's.
    rx = re.compile(groups["layer1.mlp"]["regex"])
    assert rx.search(PREFIX.format(1) + "m.LlamaMLP_mlp/x;") and not rx.search(PREFIX.format(11) + "m.LlamaMLP_mlp/x;")
    assert groups["embedding"]["buffers"] & groups["lm_head"]["buffers"] == {1}
    assert [u["type"] for u in ungrouped] == ["DEPTHWISE_CONV_2D"]


def test_qwen35_gates_are_their_own_group_and_their_rule_comes_after_the_blocks():
    base = "q.Qwen3_5StaticDecoderLayer_2/q.Qwen3_5StaticGatedDeltaNet_linear_attn/"
    ops = [_op("FULLY_CONNECTED", base + "t.Linear_in_proj_qkv;1;", 1),
           _op("FULLY_CONNECTED", base + "t.Linear_in_proj_b;" + base + "t.Linear_in_proj_qkv;1;", 2),
           _op("FULLY_CONNECTED", base + "t.Linear_out_proj;2;", 3)]
    groups, _ = assign_groups(ops, _patterns("qwen3_5"))
    assert len(groups["layer2.gdn_gates"]["keys"]) == 1 and len(groups["layer2.gdn"]["keys"]) == 2
    order = [g["name"] for g in recipe_order(groups)]
    # The quantizer's last match wins: the specific gates rule must follow the block rule that also matches them.
    assert order.index("layer2.gdn") < order.index("layer2.gdn_gates")


def test_windows_start_with_the_tokenizers_prefix_and_cover_the_positions():
    w = windows_of([2], list(range(100, 400)), positions=96, window=32)
    assert len(w) == 3 and all(x[0] == 2 and len(x) == 32 for x in w)
    assert w[1][1] == w[0][-1] + 1  # consecutive text, no id skipped
    with pytest.raises(BadInput, match="fewer than"):
        windows_of([], list(range(50)), positions=96, window=32)


@pytest.mark.parametrize("bits", [2, 4])
def test_unpacking_inverts_the_quantizers_packing(bits):
    rng = np.random.default_rng(0)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    values = rng.integers(lo, hi + 1, size=37).astype(np.int8)
    per = 8 // bits
    padded = np.concatenate([values, np.zeros((-len(values)) % per, np.int8)]).astype(np.uint8) & ((1 << bits) - 1)
    packed = np.zeros(len(padded) // per, np.uint8)
    for k in range(per):  # the first value in the low bits (transformation_utils.pack_data)
        packed |= (padded[k::per] << (k * bits)).astype(np.uint8)
    assert (tflite._unpack(packed, bits, len(values)) == values).all()


def _sylvester(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(n)).astype(np.float32)


def test_the_quantizers_inserted_hadamard_matrix_is_told_from_a_weight():
    # The read-backs leave out the FULLY_CONNECTED a decomposed Hadamard rotation inserts; a model
    # weight that merely looks like one (same magnitudes, not orthogonal; not square; not 2^k) stays in.
    assert tflite.is_hadamard(_sylvester(128)) and tflite.is_hadamard(_sylvester(2))
    assert not tflite.is_hadamard(np.abs(_sylvester(128)))  # ±1/sqrt(n) entries, not orthogonal
    assert not tflite.is_hadamard(_sylvester(128)[:, :64])
    assert not tflite.is_hadamard(np.eye(128, dtype=np.float32))
    assert not tflite.is_hadamard(np.full((3, 3), 1 / np.sqrt(3), dtype=np.float32))
    noisy = _sylvester(64)
    noisy[5, 7] *= 1.01
    assert not tflite.is_hadamard(noisy)


def test_on_a_source_grid_export_recovery_applies_only_to_split_groups_and_offsets_come_last():
    from farm_toolchain.sensitivity import _blocks_misfit, _not_split, _with_offsets

    base = PREFIX.format(3) + "m.LlamaMLP_mlp/farm_toolchain.grid.GridLinear_down_proj/torch.nn.modules.linear."
    sym = {"type": "FULLY_CONNECTED", "scope": base + "Linear_grid_sym;1;", "key": "s",
           "weights": [{"buffer": 1, "shape": [576, 1536]}]}
    off = {"type": "FULLY_CONNECTED", "scope": base + "Linear_grid_offset;1;", "key": "o",
           "weights": [{"buffer": 2, "shape": [576, 48]}]}
    plain = {"type": "FULLY_CONNECTED", "scope": "decode_logits_output;", "key": "h",
             "weights": [{"buffer": 3, "shape": [49152, 576]}]}
    by_key = {o["key"]: o for o in (sym, off, plain)}
    b32 = {"op_config": {"weight_tensor_config": {"granularity": "BLOCKWISE_32"}}}
    # The offsets (48 inputs) take the request's offsets entry, so a blockwise treatment still fits the group.
    assert _blocks_misfit({"keys": ["s", "o"]}, by_key, b32) is None
    assert _not_split({"keys": ["s", "o"]}, by_key) is None
    # Negative control: a group with a layer the export did not split cannot take recovery.
    assert "not on a 4-bit grid" in _not_split({"keys": ["h"]}, by_key)
    entries = [{"regex": "x", "operation": "FULLY_CONNECTED", "algorithm_key": "dequantized_weight_recovery", "op_config": {}}]
    grid = {"algorithm_key": "float_casting", "op_config": {"compute_precision": "FLOAT"}}
    out = _with_offsets({"source_grid": grid}, entries)
    assert out[:-1] == entries and out[-1]["regex"] == "Linear_grid_offset;" and out[-1]["algorithm_key"] == "float_casting"
    assert _with_offsets({"source_grid": None}, entries) == entries
