"""Treatment names (farm/recipes/treatments.py) render through the recipe rule modes."""

from __future__ import annotations

import pytest

from farm.errors import BadInput
from farm.recipes.treatments import parse_treatment, parse_treatments


@pytest.mark.parametrize("name, mode, bits, granularity, algorithm", [
    ("int8", "dynamic", 8, "channelwise", "min_max_uniform_quantize"),
    ("int4_b32", "dynamic", 4, "blockwise_32", "min_max_uniform_quantize"),
    ("int4_b64_octav", "dynamic", 4, "blockwise_64", "OCTAV"),
    ("int8_wo", "weight_only", 8, "channelwise", "min_max_uniform_quantize"),
    ("int4_b32_wo_mse", "weight_only", 4, "blockwise_32", "MSE"),
    ("int2_c", "dynamic", 2, "channelwise", "min_max_uniform_quantize"),
    ("int8_hr", "dynamic", 8, "channelwise", "DECOMPOSED_HADAMARD_ROTATION"),
    ("int4_b32_hr", "dynamic", 4, "blockwise_32", "DECOMPOSED_HADAMARD_ROTATION"),
    ("fp16", "fp16", 16, "channelwise", "min_max_uniform_quantize"),
    ("float", "float", None, "channelwise", "min_max_uniform_quantize"),
])
def test_names_parse(name, mode, bits, granularity, algorithm):
    t = parse_treatment(name)
    assert (t.mode, t.bits, t.granularity, t.algorithm) == (mode, bits, granularity, algorithm)


def test_a_treatment_renders_the_quantizers_entry_and_its_rule_reads_back_at_its_bits():
    t = parse_treatment("int4_b32")
    assert t.entry()["op_config"]["weight_tensor_config"] == {"num_bits": 4, "symmetric": True,
                                                              "granularity": "BLOCKWISE_32", "dtype": "INT"}
    rule = t.rule("mlp_int4_b32", "DecoderLayer_(?:1|2)/[^/;]*_mlp[/;]", "FULLY_CONNECTED", reason="r")
    assert rule.expected_bits() == 4 and rule.label() == "int4 b32 dynamic"
    assert parse_treatment("fp16").rule("x", ".*", "FULLY_CONNECTED").expected_bits() == 16
    assert parse_treatment("float").rule("x", ".*", "FULLY_CONNECTED").expected_bits() is None
    assert parse_treatment("int8").digest() != parse_treatment("int8_wo").digest()


@pytest.mark.parametrize("bad", ["int3", "int4_b16", "int4_b32_gptq", "float32", "", "int8_octav_wo"])
def test_unknown_names_are_bad_input_naming_the_grammar(bad):
    with pytest.raises(BadInput, match="treatment"):
        parse_treatment(bad)


def test_duplicates_are_dropped_in_order():
    assert [t.name for t in parse_treatments(["int8", "INT8", "int4_b32"])] == ["int8", "int4_b32"]


def test_a_hadamard_rotation_is_dynamic_range_only_and_marked_rotated():
    assert parse_treatment("int8_hr").rotated and not parse_treatment("int8_octav").rotated
    for bad in ("int8_wo_hr", "int8_a16_hr"):  # the quantizer writes no DEQUANTIZE / no ranges for it
        with pytest.raises(BadInput, match="dynamic-range only"):
            parse_treatment(bad)


def test_a_rotated_blockwise_token_table_is_refused_before_the_quantizer_crashes_on_it(tmp_path):
    # ai-edge-quantizer 0.10.0: a TypeError in quantize_tensor.py on a rotated blockwise EMBEDDING_LOOKUP
    # (measured on Gemma 3 and SmolLM2); a rotated blockwise FULLY_CONNECTED quantizes.
    from farm.recipes import load_recipe

    rule = "  - {name: t, regex: '.*', op: %s, algorithm: DECOMPOSED_HADAMARD_ROTATION, weights: {bits: 4%s}}\n"
    for name, body in (("table_c", rule % ("EMBEDDING_LOOKUP", "")),
                       ("linears_b32", rule % ("FULLY_CONNECTED", ", granularity: blockwise_32"))):
        (tmp_path / f"{name}.yaml").write_text("rules:\n" + body)
        assert load_recipe(tmp_path / f"{name}.yaml", tmp_path).all_rules()
    for op in ("EMBEDDING_LOOKUP", "'*'"):
        (tmp_path / "bad.yaml").write_text("rules:\n" + rule % (op, ", granularity: blockwise_32"))
        with pytest.raises(BadInput, match="must be channelwise"):
            load_recipe(tmp_path / "bad.yaml", tmp_path)
