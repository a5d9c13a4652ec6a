"""Recipes found by measurement, on the tiny Llama (builtin ops: the Interpreter runs its exact
bytes): the sensitivity sweep ranks a deliberately broken group first and agrees with the
Interpreter; a search with an impossible target ends "no recipe meets it" with the frontier and
exit 1, writing nothing; a search that meets its target writes a recipe whose every rule cites its
figures, records the search, and the recipe rebuilds to the same sha256 (farm rebuild, and a build in
a fresh FARM_HOME)."""

from __future__ import annotations

import json

import pytest
import yaml

from farmtest import REPO, farm_env, run_farm

pytestmark = pytest.mark.slow

TINY_LLAMA = REPO / "examples" / "tiny-llama.yaml"


@pytest.fixture(scope="module")
def farm(tmp_path_factory, prefect_server, toolchain_python):
    env = farm_env(tmp_path_factory.mktemp("tune-home"), prefect_server)
    return lambda *args, **extra: run_farm(list(args), {**env, **extra})


def test_sensitivity_ranks_a_broken_group_first_and_the_simulation_agrees_with_the_interpreter(farm, tmp_path):
    proc = farm("sensitivity", str(TINY_LLAMA), "-t", "int8", "--set", "layer1.mlp=int2_c", "--json",
                "--chart", str(tmp_path / "s.png"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["positions"] >= 2000 and out["text"]["sha256"]
    assert {g["name"] for g in out["groups"]} == {"embedding", "lm_head", "layer0.attention", "layer0.mlp",
                                                  "layer1.attention", "layer1.mlp"}
    top = out["table"][0]
    assert (top["group"], top["treatment"]) == ("layer1.mlp", "int2_c"), out["table"][:3]
    assert top["kl"] > 20 * out["table"][1]["kl"]
    sweep = out["sweeps"][0]
    check = sweep["interpreter_check"]
    # The PyTorch substitution against the exact bytes through the Interpreter, same positions.
    assert check["ran"] and check["kl_simulated"] == pytest.approx(check["kl_interpreter"], rel=0.1)
    assert (tmp_path / "s.png").stat().st_size > 1000
    # Recorded, so a second sweep is a lookup.
    again = json.loads(farm("sensitivity", str(TINY_LLAMA), "-t", "int8", "--set", "layer1.mlp=int2_c",
                            "--json").stdout)
    assert again["sweeps"][0]["reused"] and again["table"][0]["kl"] == top["kl"]


def test_a_hadamard_rotated_treatment_is_measured_through_the_interpreter(farm):
    # Its stored weights are rotated and its graph rotates their inputs: substituting them into
    # PyTorch would score another model, so each group is scored on the exact bytes.
    proc = farm("sensitivity", str(TINY_LLAMA), "-t", "int8_hr", "-g", "layer0.mlp", "-g", "lm_head", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["group"]: r for r in json.loads(proc.stdout)["table"]}
    assert set(rows) == {"layer0.mlp", "lm_head"}
    for r in rows.values():
        assert r["simulated"] == "interpreter" and r["weight_rel_error"] is None
        assert 0 <= r["kl"] < 0.05 and r["top1"] > 0.8  # int8 after a rotation: near the float model


def test_an_impossible_target_ends_with_the_frontier_and_writes_no_recipe(farm, tmp_path):
    out_path = tmp_path / "never.yaml"
    proc = farm("tune", str(TINY_LLAMA), "--max-kl", "1e-9", "--max-bytes-per-param", "0.2", "--out", str(out_path),
                "-t", "int8", "-t", "int4_b32", "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["status"] == "not_met" and res["reason"].startswith("no recipe meets it")
    assert "bytes/param" in res["reason"] and res["candidates"] == []
    assert {p["kind"] for p in res["frontier"]} >= {"uniform", "predicted"}
    assert not out_path.exists()


def test_a_met_target_writes_a_cited_recipe_that_rebuilds_to_the_same_bytes(farm, tmp_path, prefect_server):
    out_path = tmp_path / "tiny-llama-tuned.yaml"
    proc = farm("tune", str(TINY_LLAMA), "--max-kl", "0.001", "--min-top1", "0.97", "--out", str(out_path),
                "-t", "int8", "-t", "int4_b32", "--max-tries", "5", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    res = json.loads(proc.stdout)
    chosen = res["chosen"]
    assert res["status"] == "met" and chosen["gates"] == "pass" and chosen["kl"] <= 0.001 and chosen["top1"] >= 0.97
    recipe = yaml.safe_load(out_path.read_text())
    assert recipe["name"] == "tiny-llama-tuned" and recipe["rules"]
    assert all("KL" in r["reason"] and "held-out positions" in r["reason"] for r in recipe["rules"])
    # The search is on record, candidate by candidate.
    lineage = json.loads(farm("lineage", chosen["bundle_sha256"], "--json").stdout)
    assert lineage["recipe"]["name"] == "tiny-llama-tuned"
    # The recipe reproduces: farm rebuild (a scratch farm) and a build in a fresh FARM_HOME.
    rebuilt = farm("rebuild", chosen["bundle_sha256"], "--json")
    assert rebuilt.returncode == 0 and json.loads(rebuilt.stdout)["verdict"] == "MATCH", rebuilt.stdout[-3000:]
    fresh = run_farm(["build", str(TINY_LLAMA), "--recipe", str(out_path), "--no-gates", "--json"],
                     farm_env(tmp_path / "fresh-home", prefect_server))
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads(fresh.stdout)["artifact"]["sha256"] == chosen["bundle_sha256"]
