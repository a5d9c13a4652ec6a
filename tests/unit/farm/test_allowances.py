"""Recipe allowances (farm/recipes/allowances.py): a recipe's class defaults, what it declares, and
how they reach the gates under the build config's own settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.gates.config import GateConfig
from farm.recipes import load_recipe
from farm.recipes.allowances import DEFAULTS, recipe_class

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def _write(d: Path, name: str, body: str) -> Path:
    p = d / f"{name}.yaml"
    p.write_text(body)
    return p


INT4 = "rules:\n  - {name: l, regex: '.*', op: FULLY_CONNECTED, weights: {bits: 4, granularity: blockwise_32}}\n"


@pytest.mark.parametrize("bits, cls", [(None, "float"), (16, "float"), (8, "int8"), (4, "int4"), (2, "int2")])
def test_the_class_is_the_smallest_weight_bit_width(bits, cls):
    assert recipe_class(bits) == cls


def test_shipped_recipes_take_their_class_defaults():
    a = load_recipe("dynamic_wi4_b32", RECIPES).allowances_in_force()
    assert a["class"] == "int4" and a["declared"] == [] and a["allowances"] == DEFAULTS["int4"].model_copy(update={"basis": ""})
    assert load_recipe("dynamic_wi8_afp32", RECIPES).allowances_in_force()["class"] == "int8"


def test_a_declared_allowance_overrides_its_class_default_and_enters_the_digest(tmp_path):
    plain = load_recipe(_write(tmp_path, "r4", INT4), tmp_path)
    declared = load_recipe(_write(tmp_path, "r4b", INT4 + "allowances: {kl_max: 0.1, basis: measured}\n"), tmp_path)
    a = declared.allowances_in_force()
    assert a["allowances"].kl_max == 0.1 and a["allowances"].top1_min == DEFAULTS["int4"].top1_min
    assert a["declared"] == ["kl_max"] and a["basis"] == "measured"
    # How the bytes are judged is part of what the recipe is; a recipe without allowances keeps its digest.
    again = load_recipe(_write(tmp_path, "r4b", INT4 + "allowances: {kl_max: 0.1, basis: other words}\n"), tmp_path)
    assert again.digest() == declared.digest()
    assert load_recipe(_write(tmp_path, "r4b", INT4), tmp_path).digest() != declared.digest()
    assert plain.allowances is None


def test_unknown_allowance_is_bad_input(tmp_path):
    from farm.errors import BadInput

    with pytest.raises(BadInput, match="allowances"):
        load_recipe(_write(tmp_path, "bad", INT4 + "allowances: {kl: 0.1}\n"), tmp_path)


def test_allowances_sit_under_the_configs_own_settings_and_never_enable_an_optional_gate():
    cfg = GateConfig.model_validate({"logits_parity": {"kl_max": 0.01}, "skip": ["prompt_lengths"]})
    merged = cfg.with_defaults({"logits_parity": {"kl_max": 0.25, "top1_min": 0.65},
                                "prompt_lengths": {"tie_margin": 0.25},
                                "task_accuracy": {"max_lost_fraction": 0.3}})
    lp = merged.params_for("logits_parity")
    assert lp.kl_max == 0.01 and lp.top1_min == 0.65  # the config wins where it speaks
    assert "prompt_lengths" not in merged.params  # skipped stays skipped
    assert not merged.enables("task_accuracy")  # a default is not a request to run an optional gate
    on = GateConfig.model_validate({"task_accuracy": {}}).with_defaults({"task_accuracy": {"max_lost_fraction": 0.3}})
    assert on.params_for("task_accuracy").max_lost_fraction == 0.3
