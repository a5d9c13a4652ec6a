"""Recipes as data (farm/recipes.py) and the quantize stage's per-rule read-back check: pure, no
toolchain. What the installed quantizer accepts and re-emits is tests/test_recipes_toolchain.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.errors import BadInput
from farm.families import get_family
from farm.recipes import RECIPES_DIR, Recipe, list_recipes, load_recipe
from farm.stages.quantize import check_rules

SHIPPED = ["dynamic_wi4_b32", "dynamic_wi8_afp32", "float32", "qwen35_wi8_float_gates", "smollm2-135m-classes", "smollm2-135m-tuned",
           "source_grid_wi4_b32",
           "static_wi8_ai16",
           "weight_only_wi8", "weight_only_wi8_hr_embedding"]


def _write(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\n" + body)
    return p


def test_the_shipped_recipes_load():
    assert list_recipes(RECIPES_DIR) == SHIPPED
    for name in SHIPPED:
        r = load_recipe(name, RECIPES_DIR)
        assert r.render() and r.digest()


def test_recipes_written_before_rules_render_as_they_did():
    """Their digests are in every cache key and lineage row made with them: the scheme and
    float-exception forms must render entry for entry as before (digests pinned)."""
    assert load_recipe("dynamic_wi8_afp32", RECIPES_DIR).digest() == \
        "5df1ab90a0df0fbce5be6503f74f2d800f2e298aa96bebf710135ef82d2052bf"
    assert load_recipe("qwen35_wi8_float_gates", RECIPES_DIR).digest() == \
        "ddec8ef6e0064586b8a702fe4e02e1ea6f499d41721955a7fbca7757a542d649"
    r = load_recipe("qwen35_wi8_float_gates", RECIPES_DIR).render()
    assert [(e["operation"], e["algorithm_key"]) for e in r] == [
        ("FULLY_CONNECTED", "min_max_uniform_quantize"), ("EMBEDDING_LOOKUP", "min_max_uniform_quantize"),
        ("*", "no_quantize")]


def test_int4_rule_renders_the_quantizers_op_config_and_the_embedding_keeps_int8():
    r = load_recipe("dynamic_wi4_b32", RECIPES_DIR).render()
    fc, emb, head = r
    assert fc["operation"] == "FULLY_CONNECTED" and emb["operation"] == "EMBEDDING_LOOKUP"
    # The lm_head quantized like the embedding (a tied lm_head then shares its int8 buffer).
    assert head["regex"] == "logits_output" and head["op_config"]["weight_tensor_config"]["num_bits"] == 8
    assert fc["op_config"]["weight_tensor_config"] == {"num_bits": 4, "symmetric": True, "granularity": "BLOCKWISE_32",
                                                       "dtype": "INT"}
    assert emb["op_config"]["weight_tensor_config"]["num_bits"] == 8
    assert fc["op_config"]["compute_precision"] == "INTEGER" and fc["op_config"]["explicit_dequantize"] is False


def test_weight_only_and_static_modes_render_their_compute_precision():
    wo = load_recipe("weight_only_wi8", RECIPES_DIR).render()[0]["op_config"]
    assert wo["compute_precision"] == "FLOAT" and wo["explicit_dequantize"] is True
    st = load_recipe("static_wi8_ai16", RECIPES_DIR).render()[0]["op_config"]
    assert st["activation_tensor_config"] == {"num_bits": 16, "symmetric": True, "granularity": "TENSORWISE", "dtype": "INT"}
    assert st["compute_precision"] == "INTEGER"


def test_later_rules_win_and_a_rule_can_give_other_bits(tmp_path):
    p = _write(tmp_path, "mixed", "rules:\n"
               "  - {name: all, regex: '.*', op: FULLY_CONNECTED, weights: {bits: 4, granularity: blockwise_64}}\n"
               "  - {name: attn, regex: 'self_attn', op: FULLY_CONNECTED, weights: {bits: 8}}\n"
               "float_exceptions:\n  - {name: head, regex: 'lm_head'}\n")
    r = load_recipe(p, RECIPES_DIR)
    assert [x.name for x in r.all_rules()] == ["all", "attn", "head"]
    assert [e["op_config"].get("weight_tensor_config", {}).get("num_bits") for e in r.render()] == [4, 8, None]


@pytest.mark.parametrize("body,needle", [
    ("rules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED, weights: {bits: 3}}\n", "bits"),
    ("rules:\n  - {name: a, regex: '.*', weights: {granularity: blockwise_48}}\n", "granularity"),
    ("rules:\n  - {name: a, regex: '.*', mode: fast}\n", "mode"),
    ("rules:\n  - {name: a, regex: '.*', mode: static}\n", "activation_bits"),
    ("rules:\n  - {name: a, regex: '.*', mode: dynamic, activation_bits: 16}\n", "static rules only"),
    ("rules:\n  - {name: a, regex: '(x', op: FULLY_CONNECTED}\n", "does not compile"),
    ("rules:\n  - {name: a, regex: '.*', op: fully_connected}\n", "op"),
    ("rules: []\n", "needs rules"),
    ("rules:\n  - {name: a, regex: '.*', mode: float}\n", "quantize something"),
    ("float_only: true\nrules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED}\n", "float_only recipe quantizes nothing"),
    ("rules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED}\n  - {name: a, regex: 'x', op: FULLY_CONNECTED}\n",
     "repeat the name"),
    ("rules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED}\n  - {name: b, regex: 'x', op: FULLY_CONNECTED}\n"
     "  - {name: c, regex: '.*', op: EMBEDDING_LOOKUP}\n", "one after another"),
    ("rules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED}\n  - {name: b, regex: '.*', op: '*'}\n", "every op"),
    ("rules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED}\n  - {name: b, regex: '.*', op: FULLY_CONNECTED}\n",
     "same regex"),
    ("rules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED, mode: static, activation_bits: 8}\n", "calibration"),
    ("calibration: {file: c.txt}\nrules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED}\n", "no rule is static"),
    ("rules:\n  - {name: a, regex: '.*', op: FULLY_CONNECTED, colour: red}\n", "colour"),
])
def test_a_rule_outside_the_vocabulary_is_bad_input(tmp_path, body, needle):
    p = _write(tmp_path, "bad", body)
    with pytest.raises(BadInput, match=needle):
        load_recipe(p, RECIPES_DIR)


def _static(folder: Path, text: str, name: str = "st") -> Recipe:
    d = folder / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "cal.txt").write_text(text)
    p = _write(d, name, "calibration: {file: cal.txt, samples: 2}\nrules:\n"
               "  - {name: a, regex: '.*', op: FULLY_CONNECTED, mode: static, activation_bits: 16}\n")
    return load_recipe(p, RECIPES_DIR)


def test_the_calibration_sets_digest_enters_the_recipe_digest(tmp_path):
    """The digest is the quantize stage's cache key part: one changed calibration line is a new
    recipe, the same text is the same recipe (wherever the file lies)."""
    a = _static(tmp_path, "one line\nanother line\n", "st")
    same = _static(tmp_path / "elsewhere", "one line\nanother line\n")
    changed = _static(tmp_path / "changed", "one line\na different line\n")
    assert a.render() == changed.render()  # the quantizer is told the same entries...
    assert a.digest() == same.digest()
    assert a.digest() != changed.digest()  # ...but the calibration data differ
    assert a.calibration_sha256 != changed.calibration_sha256


def test_a_calibration_set_too_small_or_missing_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="has 1 non-empty lines"):
        _static(tmp_path, "only one\n")
    p = _write(tmp_path, "gone", "calibration: {file: nope.txt}\nrules:\n"
               "  - {name: a, regex: '.*', op: FULLY_CONNECTED, mode: static, activation_bits: 8}\n")
    with pytest.raises(BadInput, match="not found"):
        load_recipe(p, RECIPES_DIR)


def test_the_shipped_static_recipe_names_a_shipped_calibration_file():
    r = load_recipe("static_wi8_ai16", RECIPES_DIR)
    assert Path(r.calibration_path).is_file() and Path(r.calibration_path).parent == RECIPES_DIR / "calibration"
    assert len(r.calibration_sha256) == 64


# --- the read-back check (farm/stages/quantize.py check_rules) --------------------------------------

def _row(name, matched_ops, as_expected, read_back, matched_scopes=None, **kw):
    return {"name": name, "regex": ".*", "operation": "FULLY_CONNECTED", "expected_bits": 4,
            "matched_scopes": matched_ops if matched_scopes is None else matched_scopes, "matched_ops": matched_ops,
            "as_expected": as_expected, "read_back": read_back, "block_sizes": [32], "activation_types": {},
            "op_types": ["FULLY_CONNECTED"], **kw}


def test_read_back_as_the_rules_say_passes():
    recipe = load_recipe("dynamic_wi4_b32", RECIPES_DIR)
    rows = check_rules(recipe, get_family("qwen3_5"), [_row("linears", 56, 56, {"INT4": 56}),
                                                      _row("embedding", 2, 2, {"INT8": 2}, expected_bits=8)])
    assert [r["applies"] for r in rows] == [True, True] and rows[0]["label"] == "int4 b32 dynamic"


def test_negative_control_an_int4_rule_that_read_back_int8_is_refused():
    recipe = load_recipe("dynamic_wi4_b32", RECIPES_DIR)
    with pytest.raises(BadInput, match=r"rule 'linears' says int4 b32 dynamic but of the 56 ops it governs only 0"):
        check_rules(recipe, get_family("qwen3_5"), [_row("linears", 56, 0, {"INT8": 56})])


def test_negative_control_a_rule_aimed_at_real_layers_that_matches_nothing_is_refused():
    recipe = load_recipe("qwen35_wi8_float_gates", RECIPES_DIR)
    row = _row("gdn_gates", 0, 0, {}, expected_bits=None)
    with pytest.raises(BadInput, match="matched no op"):
        check_rules(recipe, get_family("qwen3_5"), [row])
    # The same rule on a family without those layers does not apply, on record.
    (out,) = check_rules(recipe, get_family("llama"), [row])
    assert out["applies"] is False


def test_negative_control_a_rule_a_later_one_overrides_everywhere_is_refused():
    recipe = load_recipe("qwen35_wi8_float_gates", RECIPES_DIR)
    with pytest.raises(BadInput, match="overrides it on every one"):
        check_rules(recipe, get_family("qwen3_5"), [_row("gdn_gates", 0, 0, {}, matched_scopes=8, expected_bits=None)])


def test_algorithms_in_the_quantizers_own_spelling_pass_the_model(tmp_path):
    """AlgorithmName values are lower case (min_max_uniform_quantize) and upper case (OCTAV, GPTQ);
    which exist is the installed quantizer's check, not a pattern's."""
    for algo in ("OCTAV", "GPTQ", "min_max_uniform_quantize"):
        p = _write(tmp_path, f"a_{algo.lower()}", f"rules:\n  - {{name: a, regex: '.*', op: FULLY_CONNECTED, algorithm: {algo}}}\n")
        assert load_recipe(p, RECIPES_DIR).render()[0]["algorithm_key"] == algo


def test_negative_control_a_calibration_file_changed_after_loading_is_refused(tmp_path):
    """A rebuild reads the recipe from lineage: its calibration text must still be the bytes the
    digest names — from the store once stored (another host, another checkout), else the file."""
    from types import SimpleNamespace

    from farm.stages.quantize import calibration_text
    from farm.store import open_store

    r = _static(tmp_path, "one line\nanother line\n")
    fresh = lambda name: SimpleNamespace(store=open_store(f"file://{tmp_path / name}"))  # noqa: E731
    Path(r.calibration_path).write_text("one line\nchanged line\n")
    with pytest.raises(BadInput, match="changed since the recipe was read"):
        calibration_text(fresh("a"), r)
    Path(r.calibration_path).unlink()
    with pytest.raises(BadInput, match="is gone"):
        calibration_text(fresh("b"), r)
    # The control: unchanged, it is stored; then the file may go (another checkout) and the store answers.
    Path(r.calibration_path).write_text("one line\nanother line\n")
    res = fresh("c")
    assert calibration_text(res, r).read_text() == "one line\nanother line\n"
    Path(r.calibration_path).unlink()
    assert calibration_text(res, r).read_text() == "one line\nanother line\n"


def test_a_float_only_recipe_keeps_every_weight_float_on_purpose():
    """The family matrix's float column: `float_only: true` lets a recipe quantize nothing (without
    it the same rules are refused as a mistake: the parametrized case above); what the quantizer is
    told is no_quantize on every op it names."""
    r = load_recipe("float32", RECIPES_DIR)
    assert r.float_only and r.min_weight_bits() is None
    assert {e["algorithm_key"] for e in r.render()} == {"no_quantize"}
