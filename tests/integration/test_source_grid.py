"""A source-grid build on a tiny Llama whose linear weights sit on GGUF Q4_1's grid (as a model
dequantized from a Q4_1 file has them): the export splits every linear but the lm_head, int4 holds
the split weights' integers (read back from the quantized file against the float export: only each
block's step moves, to bf16 precision, at most 2^-8 of a weight) where min-max int4 on the same
parts moves them by more than 5 %; a model off the grid is refused in one line (the negative
controls)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from farmtest import REPO, farm_env, run_farm

pytestmark = pytest.mark.slow

TINY_LLAMA = REPO / "examples" / "tiny-llama.yaml"

# The quantized file's int4 weights of the split layers, dequantized as stored, against the float
# export's weights of the same tensors (by name): farm_toolchain/tflite.py reads both.
COMPARE = """
import json, sys
import numpy as np
from farm_toolchain import tflite
def weights(path):
    m = tflite.Model(open(path, "rb").read())
    out = {}
    for op in tflite.weight_ops(m):
        for w in op["weights"]:
            name = op["sg"].Tensors(w["index"]).Name().decode()
            if "Linear_grid_sym" in name:
                out[name] = (w["type"], np.asarray(tflite.dequantized(m, op["sg"], w), dtype=np.float32))
    return out
f, q = weights(sys.argv[1]), weights(sys.argv[2])
def rel(a, b):
    b = b.reshape(a.shape)
    return float(np.max(np.abs(a - b) / np.where(b != 0, np.abs(b), 1.0)))
print(json.dumps({"tensors": len(q), "types": sorted({t for t, _ in q.values()}),
                  "max_rel_change": max(rel(q[n][1], f[n][1]) for n in q)}))
"""


@pytest.fixture(scope="module")
def farm(tmp_path_factory, prefect_server, toolchain_python):
    env = farm_env(tmp_path_factory.mktemp("grid-home"), prefect_server)
    return lambda *args: run_farm(list(args), env)


@pytest.fixture(scope="module")
def q4_config(tmp_path_factory):
    raw = yaml.safe_load(TINY_LLAMA.read_text())
    raw["name"] = "tiny-llama-q4"
    raw["source"]["weights_grid"] = "q4_1"
    out = tmp_path_factory.mktemp("grid-config") / "tiny-llama-q4.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def _build(farm, config, recipe: str) -> dict:
    proc = farm("build", str(config), "--recipe", recipe, "--no-gates", "--no-bench", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sha = json.loads(proc.stdout)["artifact"]["sha256"]
    return json.loads(farm("lineage", sha, "--json").stdout)


def _held(toolchain_python: str, float_path: str, quantized_path: str) -> dict:
    proc = subprocess.run([toolchain_python, "-c", COMPARE, float_path, quantized_path], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_a_source_grid_build_holds_the_sources_4bit_weights(farm, q4_config, toolchain_python, tmp_path):
    rec = _build(farm, q4_config, "source_grid_wi4_b32")
    grid = rec["float_export"]["source_grid"]
    # 2 layers × (q, k, v, o, gate, up, down); the untied lm_head stays whole (its op writes the logits).
    assert grid["split"] == 14 and grid["linears"] == 15 and list(grid["kept"]) == ["lm_head"]
    rules = {r["name"]: r for r in rec["recipe"]["rules"]}
    sym, off = rules["grid_weights"], rules["grid_offsets"]
    assert sym["matched_ops"] > 0 and sym["read_back"] == {"INT4": sym["matched_ops"]} and sym["block_sizes"] == [32]
    assert off["read_back"] == {"FLOAT16": off["matched_ops"]} and off["matched_ops"] == sym["matched_ops"]
    assert rec["details"]["allowances"]["class"] == "int8"  # judged by what it rounds
    float_path = rec["float_export"]["uri"].removeprefix("file://")
    held = _held(toolchain_python, float_path, rec["recipe"]["quantized_model"]["uri"].removeprefix("file://"))
    # Each signature names its own tensors (decode's 14, prefill's without the last layer's dead ops).
    assert held["tensors"] >= 14 and held["types"] == ["INT4"]
    # Every integer is the source's; the quantizer stores each block's step at bf16 precision (8
    # significant bits, round to nearest: half a step of 2^-7), so a weight moves by at most 2^-8 of itself.
    assert 0 < held["max_rel_change"] <= 2 ** -8
    # Negative control: the same recipe with min-max in place of recovery re-rounds a block whose
    # largest level is -8 by 8/7, and the same measurement says so.
    from farm.recipes import RECIPES_DIR, load_recipe
    from farm.settings import Settings
    from farm.toolchain import Toolchain

    text = (RECIPES_DIR / "source_grid_wi4_b32.yaml").read_text()
    assert "    algorithm: dequantized_weight_recovery\n" in text
    (tmp_path / "minmax_grid.yaml").write_text(text.replace("    algorithm: dequantized_weight_recovery\n", "")
                                               .replace("name: source_grid_wi4_b32", "name: minmax_grid"))
    minmax = load_recipe(tmp_path / "minmax_grid.yaml", tmp_path)
    tc = Toolchain(Settings(home=tmp_path / "tc", toolchain_python=toolchain_python))
    try:
        tc.call("quantize", {"input_path": float_path, "output_path": str(tmp_path / "minmax.tflite"),
                             "recipe": minmax.render(), "rules": minmax.toolchain_rules()})
    finally:
        tc.close()
    rerounded = _held(toolchain_python, float_path, str(tmp_path / "minmax.tflite"))
    assert rerounded["types"] == ["INT4"] and rerounded["max_rel_change"] > 0.05


def test_negative_control_a_model_off_the_grid_is_refused_in_one_line(farm):
    proc = farm("build", str(TINY_LLAMA), "--recipe", "source_grid_wi4_b32", "--no-gates", "--no-bench")
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert "none of the model's" in proc.stderr and "4-bit" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, line
