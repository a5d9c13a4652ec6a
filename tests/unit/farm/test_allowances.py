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


GRID = ("source_grid: true\nrules:\n"
        "  - {name: l, regex: '.*', op: FULLY_CONNECTED, weights: {bits: 8}}\n"
        "  - {name: g, regex: 'Linear_grid_sym;', op: FULLY_CONNECTED, algorithm: dequantized_weight_recovery,"
        " weights: {bits: 4, granularity: blockwise_32}}\n")


def test_int4_weights_held_on_the_sources_grid_are_judged_by_what_the_recipe_rounds():
    # Recovery on a source-grid export writes the source's own integers back: nothing re-rounded,
    # so the class is that of the other rules (int8), and the basis says why.
    a = load_recipe("source_grid_wi4_b32", RECIPES).allowances_in_force()
    assert a["class"] == "int8" and "hold the source's own grid" in a["basis"]
    assert a["allowances"].max_lost_fraction == DEFAULTS["int8"].max_lost_fraction


def test_negative_control_recovery_without_a_source_grid_or_a_min_max_int4_rule_stays_int4(tmp_path):
    # The same rules over a plain export: recovery there is no claim about the source's grid.
    plain = load_recipe(_write(tmp_path, "p", GRID.replace("source_grid: true\n", "")), tmp_path)
    assert plain.allowances_in_force()["class"] == "int4"
    # A source-grid recipe that also re-rounds something to int4 (min-max) is judged as int4.
    mixed = load_recipe(_write(tmp_path, "m", GRID + "  - {name: e, regex: 'embed', op: EMBEDDING_LOOKUP, "
                                              "weights: {bits: 4}}\n"), tmp_path)
    assert mixed.allowances_in_force()["class"] == "int4"
