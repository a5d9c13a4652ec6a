
from pathlib import Path

import pytest

from farm.config import BuildConfig, GeneratedSource, LocalSource, load_config
from farm.digest import digest
from farm.errors import BadInput
from farm.families import check_architecture, get_family
from farmtest import REPO

EXAMPLES = REPO / "examples"


@pytest.mark.parametrize("name", ["tiny-qwen35.yaml", "tiny-llama.yaml", "hf-qwen35-0.8b.yaml"])
def test_examples_load(name):
    cfg = load_config(EXAMPLES / name)
    get_family(cfg.family)
    assert cfg.bundle_name(cfg.recipe).endswith(".litertlm")


def test_tiny_qwen35_is_generated_and_mixes_layer_types():
    cfg = load_config(EXAMPLES / "tiny-qwen35.yaml")
    assert isinstance(cfg.source, GeneratedSource)
    assert set(cfg.source.config["layer_types"]) == {"linear_attention", "full_attention"}
    assert cfg.recipe == "qwen35_wi8_float_gates"


def test_missing_config_file(tmp_path):
    with pytest.raises(BadInput, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_invalid_yaml_and_unknown_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(BadInput, match="not valid YAML"):
        load_config(bad)
    extra = tmp_path / "extra.yaml"
    extra.write_text("name: x\nfamily: llama\nsource: {kind: local, path: .}\nsurprise: 1\n")
    with pytest.raises(BadInput, match="surprise"):
        load_config(extra)


def test_local_path_is_relative_to_the_config(tmp_path):
    (tmp_path / "sub").mkdir()
    cfg_file = tmp_path / "sub" / "c.yaml"
    cfg_file.write_text("name: x\nfamily: llama\nsource: {kind: local, path: ../model}\n")
    cfg = load_config(cfg_file)
    assert isinstance(cfg.source, LocalSource)
    assert cfg.source.path == (tmp_path / "model").resolve()


def test_recipe_override_and_digest_is_order_independent():
    cfg = BuildConfig(name="a", family="llama", source={"kind": "local", "path": "/x"})
    assert cfg.with_recipe("other").recipe == "other"
    assert cfg.with_recipe(None) is cfg
    assert digest({"a": 1, "b": [1, 2]}) == digest({"b": [1, 2], "a": 1})
    assert digest({"a": 1}) != digest({"a": 2})


def test_unknown_family_and_unsupported_architecture():
    with pytest.raises(BadInput, match="unknown model family 'gpt9'"):
        get_family("gpt9")
    with pytest.raises(BadInput, match="unsupported architecture.*BertModel"):
        check_architecture(get_family("qwen3_5"), ["BertModel"], "config.json")
    check_architecture(get_family("qwen3_5"), ["Qwen3_5ForCausalLM"], "config.json")
    # Another family's architecture: the config is told which family it is (issue 18, item 3).
    with pytest.raises(BadInput, match="is family 'gemma3', not 'llama': set `family: gemma3`"):
        check_architecture(get_family("llama"), ["Gemma3ForCausalLM"], "config.json")
    with pytest.raises(BadInput, match="unsupported architecture"):  # and none: not a family's
        check_architecture(get_family("llama"), None, "config.json")


def test_a_source_grid_export_comes_from_the_recipe_not_the_config(tmp_path):
    from farm.recipes import RECIPES_DIR, load_recipe
    from farm.stages.convert import export_config

    cfg = load_config(EXAMPLES / "tiny-llama.yaml")
    # A plain export's settings carry no source_grid key, so every earlier cache key stands.
    assert "source_grid" not in export_config(cfg)
    grid = cfg.for_recipe(load_recipe("source_grid_wi4_b32", RECIPES_DIR))
    assert grid.export.source_grid and export_config(grid)["source_grid"] is True
    assert grid.for_recipe(load_recipe("dynamic_wi8_afp32", RECIPES_DIR)).export.source_grid is False
    bad = tmp_path / "c.yaml"
    bad.write_text((EXAMPLES / "tiny-llama.yaml").read_text().replace("  cache_length: 64\n",
                                                                       "  cache_length: 64\n  source_grid: true\n"))
    with pytest.raises(BadInput, match="source_grid is set by the recipe"):
        load_config(bad)


def test_a_config_that_names_no_family_gets_it_from_the_source(tmp_path):
    """Issue 18, item 3: a local folder's config.json `architectures`, a generated source's own
    family; a hub source, or architectures no family converts, are one clear line (the negative
    controls)."""
    import json

    import yaml

    folder = tmp_path / "model"
    folder.mkdir()

    def config(source: dict) -> Path:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump({"name": "m", "source": source}))
        return path

    for arch, family in (("LlamaForCausalLM", "llama"), ("Gemma3ForCausalLM", "gemma3"),
                         ("Qwen3_5ForCausalLM", "qwen3_5")):
        (folder / "config.json").write_text(json.dumps({"architectures": [arch]}))
        assert load_config(config({"kind": "local", "path": str(folder)})).family == family
    assert load_config(config({"kind": "generated", "family": "gemma3"})).family == "gemma3"
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(BadInput, match=r"names no family and no family converts the architectures \['BertModel'\]"):
        load_config(config({"kind": "local", "path": str(folder)}))
    (folder / "config.json").unlink()
    with pytest.raises(BadInput, match="names no family and .*config.json cannot tell it"):
        load_config(config({"kind": "local", "path": str(folder)}))
    with pytest.raises(BadInput, match="names no family: set `family:` \\(one of .*llama"):
        load_config(config({"kind": "hf", "repo_id": "a/b", "revision": "0" * 40}))
