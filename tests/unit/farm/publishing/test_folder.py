"""`farm publish --to DIR` on a crafted lineage with real bytes in a local store: the folder
round-trips (every file's sha256 equals the manifest's and lineage's, README.md's metadata is
Hugging Face front matter), `--check` passes on it and refuses a swapped file, an edited manifest,
a stale README and a stray bundle (negative controls), a republish removes the file it replaced, and
a damaged object in the store never reaches the folder."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from farm.config import load_config
from farm.errors import StoreError
from farm.lineage.record import record_recipe
from farm.publishing.folder import check_folder, write_folder
from farm.publishing.repo_files import MANIFEST
from farm.recipes.base import load_recipe
from farmtest import REPO
from farmtest.cards import Lineage


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


CONFIG = {"name": "tiny", "family": "qwen3_5", "recipe": "dynamic_wi8_afp32",
          "source": {"kind": "generated", "family": "qwen3_5", "seed": 0},
          "export": {"prefill_lengths": [8], "cache_length": 64, "source_grid": False}}


@pytest.fixture
def lin(tmp_path):
    lin = Lineage(tmp_path)
    recipe = load_recipe("dynamic_wi8_afp32", REPO / "recipes")
    with lin.db.session() as s:
        lin.recipe = record_recipe(s, recipe.digest(), recipe.name, recipe.model_dump(mode="json"), [])
    a = lin.file("a", "q1", content=b"litertlm bytes, version one" * 100,
                 details={"config": CONFIG,
                          "card": {"license": "apache-2.0", "task": "text-generation", "source_url": None,
                                   "base_model": "Org/tiny-base"}})
    for g in ("tokenizer_parity", "logits_parity", "generation_parity", "metadata", "arithmetic"):
        lin.gate(a, g)
    lin.device(a)
    lin.a = a
    return lin


def test_a_published_folder_round_trips_and_its_readme_is_hub_front_matter(lin, tmp_path):
    out = write_folder(lin.res, "tiny", tmp_path / "repo")
    repo = tmp_path / "repo"
    names = {f["path"] for f in out["files"]}
    assert {"README.md", "card.json", "chart.png", MANIFEST, "REPRODUCE.md", "tiny_r.litertlm"} <= names
    assert _sha(repo / "tiny_r.litertlm") == lin.a
    manifest = json.loads((repo / MANIFEST).read_text())
    (entry,) = manifest["files"]
    assert (entry["file"], entry["sha256"]) == ("tiny_r.litertlm", lin.a)
    assert entry["runtime_compatibility"]["works_on"] == ["0.18.1"]
    assert manifest["card_sha256"] == _sha(repo / "card.json") == out["card_sha256"]
    text = (repo / "README.md").read_text()
    head, body = text[4:].split("\n---\n", 1)
    meta = yaml.safe_load(head)
    assert meta["license"] == "apache-2.0" and meta["base_model"] == "Org/tiny-base"
    assert meta["pipeline_tag"] == "text-generation" and meta["library_name"] == "litert-lm"
    assert {"litert-lm", "qwen3_5", "recipe:dynamic_wi8_afp32", "backend:cpu"} <= set(meta["tags"])
    assert "## Runtime compatibility" in body and "## Changes" in body
    assert "farm build reproduce/tiny_r.config.yaml --recipe reproduce/dynamic_wi8_afp32.yaml --json" in (
        repo / "REPRODUCE.md").read_text()
    # The command's inputs load as a user's config and recipe do (the recorded config names
    # export.source_grid, which a config may not), and the recipe is the recorded one.
    assert load_config(repo / "reproduce/tiny_r.config.yaml").name == "tiny"
    assert load_recipe(repo / "reproduce/dynamic_wi8_afp32.yaml", REPO / "recipes").digest() == entry["recipe"]["digest"]
    assert check_folder(lin.res, "tiny", repo)["failures"] == []


def test_the_check_refuses_a_swapped_file_an_edited_manifest_and_a_stray_bundle(lin, tmp_path):
    repo = tmp_path / "repo"
    write_folder(lin.res, "tiny", repo)
    good = (repo / "tiny_r.litertlm").read_bytes()
    (repo / "tiny_r.litertlm").write_bytes(good[:-1] + b"X")
    failures = check_folder(lin.res, "tiny", repo)["failures"]
    assert len(failures) == 1 and failures[0].startswith("tiny_r.litertlm: sha256 ")
    # The manifest edited to claim the swapped bytes: the reference is lineage, not the manifest.
    m = json.loads((repo / MANIFEST).read_text())
    m["files"][0]["sha256"] = _sha(repo / "tiny_r.litertlm")
    (repo / MANIFEST).write_text(json.dumps(m))
    failures = check_folder(lin.res, "tiny", repo)["failures"]
    assert any(f.startswith("tiny_r.litertlm: sha256") for f in failures)
    assert any(f.startswith(f"{MANIFEST}: differs") for f in failures)
    (repo / "tiny_r.litertlm").write_bytes(good)
    (repo / "old.litertlm").write_bytes(b"x")
    assert [f.split(":")[0] for f in check_folder(lin.res, "tiny", repo)["failures"]] == ["old.litertlm", MANIFEST]


def test_a_new_measurement_makes_the_folder_stale_and_a_republish_replaces_the_old_file(lin, tmp_path):
    repo = tmp_path / "repo"
    write_folder(lin.res, "tiny", repo)
    b = lin.file("b", "q1", tok="tok2", content=b"litertlm bytes, version two" * 100,
                 details={"config": {"name": "tiny"}, "card": {"license": "apache-2.0", "task": "text-generation"}})
    lin.gate(b, "tokenizer_parity")
    failures = check_folder(lin.res, "tiny", repo)["failures"]
    assert failures[0] == (f"tiny_r.litertlm: sha256 {lin.a} is not the {b} the card and lineage describe")
    assert any(f.startswith("README.md: differs") for f in failures)
    out = write_folder(lin.res, "tiny", repo)
    assert _sha(repo / "tiny_r.litertlm") == b and out["removed"] == []
    assert check_folder(lin.res, "tiny", repo)["failures"] == []
    changes = (repo / "README.md").read_text().split("## Changes", 1)[1]
    assert "tokenizer section replaced" in changes and "Inputs changed: tokenizer" in changes


def test_a_damaged_object_never_reaches_the_folder(lin, tmp_path):
    path = lin.res.store.open_verified_path(lin.a)
    path.chmod(0o644)
    path.write_bytes(b"rotten" * 10)
    with pytest.raises(StoreError):
        write_folder(lin.res, "tiny", tmp_path / "repo")
    assert not (tmp_path / "repo" / "tiny_r.litertlm").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".repo.publish-")] == []
