"""The family registry against the family matrix (issue 18): every registered family has a tiny
model in farm_toolchain/make_model.py and a matrix config, the two agree on the architecture and the
end-of-turn token, and a config that names no family gets each one from its config.json."""

from __future__ import annotations

import json

import pytest
import yaml

from farm.config import load_config
from farm.errors import BadInput
from farm.families import FAMILIES, check_architecture, family_of, get_family
from farm.family_matrix import matrix_configs
from farm_toolchain.make_model import FAMILIES as TINY, _chat

NAMES = [f.name for f in FAMILIES]


def test_every_family_has_a_tiny_model_and_a_matrix_config():
    assert len(NAMES) >= 13  # the 3 first families and at least 10 from the matrix
    assert set(NAMES) <= set(TINY), f"families without a tiny model: {sorted(set(NAMES) - set(TINY))}"
    generated = {}
    for path in matrix_configs():
        src = yaml.safe_load(path.read_text())["source"]
        generated[src.get("family")] = path
    missing = [n for n in NAMES if n not in generated and n != "gemma3"]
    assert not missing, f"families missing from the matrix: {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_the_tiny_model_is_of_its_family_and_ends_turns_with_its_token(name):
    family = get_family(name)
    spec = TINY[name]
    assert spec["model_class"] in family.architectures
    specials, end_of_turn, template = _chat(spec)
    # The end-of-turn token is what the metadata gate expects as a stop token: the family's fact
    # and the tiny model's tokenizer must name the same one, and the template must write it.
    assert end_of_turn == family.end_of_turn
    assert end_of_turn in specials and end_of_turn in template


@pytest.mark.parametrize("name", NAMES)
def test_a_config_that_names_no_family_gets_it_from_config_json(tmp_path, name):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": [TINY[name]["model_class"]]}))
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
