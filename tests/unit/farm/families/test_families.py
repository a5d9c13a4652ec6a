"""The family registry against the family matrix (issue 18): a family is one module, its tiny model
(`tiny`) and its matrix config (`matrix_config()`) declared there; examples/families/tiny-<family>.yaml
is that config (a hand edit that drifts from the module fails here), the tiny model is of the
family's architecture and ends turns with its token, and a config that names no family gets each
one from its config.json."""

from __future__ import annotations

import json

import pytest
import yaml

from farm.config import load_config
from farm.errors import BadInput
from farm.families import FAMILIES, check_architecture, family_of, get_family
from farm.family_matrix import matrix_configs
from farm.families.tiny import make_model_request

NAMES = [f.name for f in FAMILIES]


def drifted(configs: dict[str, dict]) -> list[str]:
    """The families whose shipped matrix config is not what their module declares."""
    return sorted(n for n, cfg in configs.items() if cfg != get_family(n).matrix_config())


def shipped_matrix_configs() -> dict[str, dict]:
    out = {}
    for path in matrix_configs():
        raw = yaml.safe_load(path.read_text())
        # examples/families/ only: the demo configs in examples/ (tiny-llama, tiny-qwen35) are the
        # matrix rows of those two families and are written for the demo, not from the module.
        if path.parent.name == "families" and raw["source"].get("kind") == "generated":
            out[raw["source"]["family"]] = raw
    return out


def test_every_family_has_a_tiny_model_and_its_matrix_config_is_its_modules():
    assert len(NAMES) >= 13  # the 3 first families and at least 10 from the matrix
    without = [n for n in NAMES if get_family(n).tiny is None]
    assert not without, f"families without a tiny model: {without}"
    shipped = shipped_matrix_configs()
    missing = [n for n in NAMES if n not in shipped and n not in ("gemma3", "llama", "qwen3_5")]
    assert not missing, f"families missing from the matrix: {missing}"
    assert drifted(shipped) == []
    # The control: a shipped config edited by hand (another export) is caught, naming the family.
    edited = {**shipped, "phi3": {**shipped["phi3"], "export": {"prefill_lengths": [16], "cache_length": 64}}}
    assert drifted(edited) == ["phi3"]


def test_a_family_without_a_tiny_model_cannot_be_generated():
    from farm.families.base import Family

    class NoTiny(Family):
        name = "no_tiny"

    with pytest.raises(BadInput, match="has no tiny model"):
        FAMILIES._units["no_tiny"] = NoTiny()
        FAMILIES._loaded = None
        try:
            make_model_request("no_tiny", seed=0)
        finally:
            FAMILIES._units.pop("no_tiny")
            FAMILIES._loaded = None


@pytest.mark.parametrize("name", NAMES)
def test_the_tiny_model_is_of_its_family_and_ends_turns_with_its_token(name):
    family = get_family(name)
    spec = family.tiny
    assert spec.model_class in family.architectures
    specials, end_of_turn, template = spec.special_tokens, spec.end_of_turn, spec.chat_template
    # The end-of-turn token is what the metadata gate expects as a stop token: the family's fact
    # and the tiny model's tokenizer must name the same one, and the template must write it.
    assert end_of_turn == family.end_of_turn
    assert end_of_turn in specials and end_of_turn in template


@pytest.mark.parametrize("name", NAMES)
def test_a_config_that_names_no_family_gets_it_from_config_json(tmp_path, name):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": [get_family(name).tiny.model_class]}))
    cfg = tmp_path / "build.yaml"
    cfg.write_text(yaml.safe_dump({"name": "m", "source": {"kind": "local", "path": str(folder)}}))
    assert load_config(cfg).family == name


def test_a_config_that_names_the_wrong_family_is_told_which_one(tmp_path):
    with pytest.raises(BadInput, match=r"is family 'phi3', not 'qwen3': set `family: phi3`"):
        check_architecture(get_family("qwen3"), ["Phi3ForCausalLM"], "config.json")


def test_an_unknown_architecture_is_refused_naming_what_the_family_converts(tmp_path):
    assert family_of(["MambaForCausalLM"]) is None
    with pytest.raises(BadInput, match=r"unsupported architecture \['MambaForCausalLM'\].*converts Qwen3ForCausalLM"):
        check_architecture(get_family("qwen3"), ["MambaForCausalLM"], "config.json")
    folder = tmp_path / "mamba"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["MambaForCausalLM"]}))
    cfg = tmp_path / "build.yaml"
    cfg.write_text(yaml.safe_dump({"name": "m", "source": {"kind": "local", "path": str(folder)}}))
    with pytest.raises(BadInput, match=r"no family converts the architectures \['MambaForCausalLM'\]"):
        load_config(cfg)
