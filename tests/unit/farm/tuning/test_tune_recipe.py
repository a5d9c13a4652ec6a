"""The recipe `farm tune` writes (farm/tuning/tune.py recipe_yaml), pure: one rule per group kind
and treatment, loadable as a recipe; over a source-grid export it says `source_grid: true` and ends
with the offsets rule, so the build that checks it converts the same split export."""

from __future__ import annotations

import yaml

from farm.config import BuildConfig
from farm.pipeline import Job
from farm.recipes import RECIPES_DIR, load_recipe
from farm.tuning.search import Target, units_from
from farm.tuning.sensitivity import table
from farm.tuning.tune import recipe_yaml

GROUPS = [{"name": "embedding", "params": 1000, "float_bytes": 4000, "shares_weights_with": ["lm_head"]},
          {"name": "lm_head", "params": 0, "float_bytes": 0, "shares_weights_with": ["embedding"]},
          {"name": "layer0.mlp", "params": 3000, "float_bytes": 12000, "shares_weights_with": []}]


def _report() -> dict:
    score = lambda g, kl, b: {"group": g, "kl": kl, "top1": 0.99, "nll_delta": 0.0, "bytes": b}  # noqa: E731
    return {"groups": GROUPS, "positions": 2048, "text": {"sha256": "ab" * 32}, "float_sha256": "cd" * 32,
            "sweeps": [{"name": "int8", "scores": [score("embedding", 0.002, 1000), score("lm_head", 0.001, 0),
                                                   score("layer0.mlp", 0.001, 3000)]},
                       {"name": "int4_b32_dwr", "scores": [score("layer0.mlp", 0.0012, 1700)]}]}


def _write(tmp_path, grid: bool):
    job = Job(config=BuildConfig(name="m", family="llama", source={"kind": "local", "path": "/x"}).with_source_grid(grid),
              recipe=load_recipe("dynamic_wi8_afp32", RECIPES_DIR))
    report = _report()
    units = units_from(report["groups"], table(report))
    choice = {"embedding+lm_head": "int8", "layer0.mlp": "int4_b32_dwr"}
    text = recipe_yaml("m-tuned", job, report, units, choice, Target(0.05, 0.85, 0.75), {"kl": 0.003, "bytes": 2700},
                       4000, 0.0, 1)
    path = tmp_path / "m-tuned.yaml"
    path.write_text(text)
    return yaml.safe_load(text), load_recipe(path, tmp_path)


def test_a_search_over_a_source_grid_writes_a_source_grid_recipe_ending_with_the_offsets_rule(tmp_path):
    doc, recipe = _write(tmp_path, grid=True)
    assert doc["source_grid"] is True and recipe.source_grid
    assert [r["name"] for r in doc["rules"]][-1] == "grid_offsets"
    assert recipe.all_rules()[-1].mode == "fp16" and recipe.all_rules()[-1].regex == "Linear_grid_offset;"
    # Its int4 is recovery on the split layers: judged by what it rounds.
    assert recipe.allowances_in_force()["class"] == "int8"


def test_negative_control_a_plain_search_writes_no_source_grid_and_no_offsets_rule(tmp_path):
    doc, recipe = _write(tmp_path, grid=False)
    assert "source_grid" not in doc and not recipe.source_grid
    assert "grid_offsets" not in [r["name"] for r in doc["rules"]]
    assert recipe.allowances_in_force()["class"] == "int4"
