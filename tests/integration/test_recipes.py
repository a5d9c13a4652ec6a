"""Every shipped recipe against the installed ai-edge-quantizer: it accepts and re-emits each
rendering unchanged, and quantizing the session's tiny Qwen3.5 float export reads back per rule as
the rule says (int4 blockwise-32 linears as INT4 in blocks of 32 with an INT8 embedding, weight-only
int8 behind DEQUANTIZE ops, static int16 activations); what it refuses is bad input before any
work, with nothing stored."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from farmtest import farm_env, run_farm
from farm.recipes import RECIPES_DIR, list_recipes, load_recipe
from farm.settings import Settings
from farm.toolchain import Toolchain

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tc(toolchain_python, tmp_path_factory):
    t = Toolchain(Settings(home=tmp_path_factory.mktemp("tc"), toolchain_python=toolchain_python))
    yield t
    t.close()


@pytest.fixture(scope="module")
def float_and_tokenizer(built):
    rec = json.loads(built.farm("lineage", built.sha256, "--json").stdout)
    fl = json.loads(built.farm("lineage", rec["float_export"]["sha256"], "--json").stdout)
    tok = json.loads(built.farm("lineage", rec["tokenizer"]["sha256"], "--json").stdout)
    return Path(fl["uri"].removeprefix("file://")), Path(tok["uri"].removeprefix("file://"))


def _quantize(tc, recipe, float_path, tokenizer, out: Path) -> dict:
    req = {"input_path": str(float_path), "output_path": str(out), "recipe": recipe.render(),
           "rules": recipe.toolchain_rules()}
    if recipe.needs_calibration():
        req["calibration"] = {"text_path": recipe.calibration_path, "tokenizer_path": str(tokenizer),
                              "samples": recipe.calibration.samples, "max_tokens": recipe.calibration.max_tokens}
    return tc.call("quantize", req)


@pytest.mark.parametrize("name", list_recipes(RECIPES_DIR))
def test_each_shipped_recipe_is_what_the_quantizer_re_emits(tc, name):
    out = tc.call("check_recipe", {"recipe": load_recipe(name, RECIPES_DIR).render()})
    assert out["accepted"] is True and out["errors"] == []


def test_int4_blockwise_reads_back_as_4_bit_with_an_int8_embedding(tc, float_and_tokenizer, tmp_path):
    recipe = load_recipe("dynamic_wi4_b32", RECIPES_DIR)
    out = _quantize(tc, recipe, *float_and_tokenizer, tmp_path / "q.tflite")
    rules = {r["name"]: r for r in out["rules"]}
    lin, emb, head = rules["linears"], rules["embedding"], rules["lm_head"]
    assert lin["matched_ops"] > 0 and lin["as_expected"] == lin["matched_ops"]
    assert lin["read_back"] == {"INT4": lin["matched_ops"]} and lin["block_sizes"] == [32]
    assert emb["matched_ops"] > 0 and emb["read_back"] == {"INT8": emb["matched_ops"]}
    assert head["matched_ops"] > 0 and head["read_back"] == {"INT8": head["matched_ops"]}
    # int4 weights: fewer bytes per parameter than the int8 recipe on the same float export.
    int8 = _quantize(tc, load_recipe("dynamic_wi8_afp32", RECIPES_DIR), *float_and_tokenizer, tmp_path / "q8.tflite")
    assert out["weight_bytes"] < 0.75 * int8["weight_bytes"]


def test_weight_only_reads_back_the_int8_weight_behind_its_dequantize(tc, float_and_tokenizer, tmp_path):
    out = _quantize(tc, load_recipe("weight_only_wi8", RECIPES_DIR), *float_and_tokenizer, tmp_path / "q.tflite")
    lin = next(r for r in out["rules"] if r["name"] == "linears")
    assert lin["matched_ops"] > 0 and lin["read_back"] == {"INT8": lin["matched_ops"]}
    assert lin["activation_types"] == {"FLOAT32": lin["matched_ops"]}  # float compute


def test_static_recipe_calibrates_and_its_linears_output_int16(tc, float_and_tokenizer, tmp_path):
    recipe = load_recipe("static_wi8_ai16", RECIPES_DIR)
    out = _quantize(tc, recipe, *float_and_tokenizer, tmp_path / "q.tflite")
    assert out["calibration_samples"] >= recipe.calibration.samples  # every signature got the samples
    lin = next(r for r in out["rules"] if r["name"] == "linears")
    assert lin["read_back"] == {"INT8": lin["matched_ops"]} and set(lin["activation_types"]) == {"INT16"}


def test_negative_control_a_rule_claiming_int4_on_an_int8_file_reads_back_wrong(tc, float_and_tokenizer, tmp_path):
    """The read-back counts what the file holds, not what the rule says: rules that claim 4 bits
    over an int8 rendering find 0 ops as expected (and the stage refuses it: test_recipes.py)."""
    recipe = load_recipe("dynamic_wi8_afp32", RECIPES_DIR)
    rules = [{**r, "expected_bits": 4} for r in recipe.toolchain_rules()]
    out = tc.call("quantize", {"input_path": str(float_and_tokenizer[0]), "output_path": str(tmp_path / "q.tflite"),
                               "recipe": recipe.render(), "rules": rules})
    fc = out["rules"][0]
    assert fc["matched_ops"] > 0 and fc["as_expected"] == 0 and fc["read_back"] == {"INT8": fc["matched_ops"]}


@pytest.mark.parametrize("rule,needle", [
    ("{name: linears, regex: '.*', op: FULLY_CONNECTED, algorithm: octav_typo}", "unknown algorithm 'octav_typo'"),
    ("{name: linears, regex: '.*', op: FULLY_CONNECTED, weights: {bits: 4, granularity: blockwise_32, symmetric: false}}",
     "the quantizer refuses this config"),
])
def test_what_the_quantizer_refuses_is_bad_input_before_any_work(tc, toolchain_python, prefect_server, tmp_path,
                                                                 rule, needle):
    import yaml

    from farm.recipes import Recipe

    out = tc.call("check_recipe", {"recipe": Recipe.model_validate({"name": "bad", "rules": [yaml.safe_load(rule)]}).render()})
    assert out["accepted"] is False and needle in out["errors"][0]
    # Through the CLI on a fresh farm: exit 2, the rule named, nothing converted or stored.
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(f"name: bad\nrules:\n  - {rule}\n")
    home = tmp_path / "home"
    env = farm_env(home, prefect_server, FARM_TOOLCHAIN_PYTHON=toolchain_python)
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--recipe", str(recipe)], env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "rule 'linears'" in line and needle in line and "Traceback" not in proc.stderr
    store = home / "store"
    assert not store.exists() or not [p for p in store.rglob("*") if p.is_file()]
    assert "stage  convert" not in proc.stderr


def test_a_hadamard_rotated_table_reads_back_int8_and_its_inserted_ops_are_no_weights(tc, toolchain_python,
                                                                                      float_and_tokenizer, tmp_path):
    """DECOMPOSED_HADAMARD_ROTATION inserts a FULLY_CONNECTED whose weight is the normalized Hadamard
    matrix: the read-back leaves it out (every rule's ops as expected, no float linear reported),
    and the gates do not take its builtin ops, named in custom_code, for custom ops."""
    out = _quantize(tc, load_recipe("weight_only_wi8_hr_embedding", RECIPES_DIR), *float_and_tokenizer,
                    tmp_path / "q.tflite")
    assert out["rotation_ops"] >= 2  # after the lookup, in front of the lm_head
    for r in out["rules"]:
        assert r["matched_ops"] > 0 and r["as_expected"] == r["matched_ops"], r
    assert "FULLY_CONNECTED" not in out["float_ops"]  # (Qwen3.5's GatedDeltaNet convolutions stay float)
    ops = subprocess.run([str(toolchain_python), "-c", "import sys; from farm_toolchain.gates.logits_parity import "
                          "custom_ops; print(custom_ops(sys.argv[1]))", str(tmp_path / "q.tflite")],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    assert ops.stdout.strip() == "[]"
    # Negative control: the same recipe without the rotation has no rotation ops to leave out.
    plain = _quantize(tc, load_recipe("weight_only_wi8", RECIPES_DIR), *float_and_tokenizer, tmp_path / "p.tflite")
    assert plain["rotation_ops"] == 0
