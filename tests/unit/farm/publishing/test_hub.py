"""The hf:// target, the commit message, and the README metadata as the hub's validation (the
replay's) reads it, with crafted metadata it refuses (negative controls)."""

from __future__ import annotations

import pytest

from farm.cards.facts import model_facts
from farm.cards.publish import compose
from farm.errors import BadInput
from farm.publishing.hub import commit_message, hub_repo
from farm.publishing.repo_files import readme
from farmtest.cards import DEVICES, Lineage, honest
from farmtest.hub_replay import readme_metadata_errors


def test_an_hf_target_is_owner_and_repo_and_a_folder_is_not_one():
    assert hub_repo("hf://me/tiny-qwen35") == "me/tiny-qwen35"
    assert hub_repo("repo/dir") is None
    for bad in ("hf://tiny", "hf://a/b/c", "hf://me/bad name"):
        with pytest.raises(BadInput, match="hf://OWNER/REPO"):
            hub_repo(bad)


def test_the_commit_message_names_every_file_and_the_card():
    repo = {"card_sha256": "c" * 64, "files": [{"path": "a.litertlm", "sha256": "a" * 64},
                                                {"path": "README.md", "sha256": "r" * 64}]}
    assert commit_message("tiny", repo) == f"farm publish tiny: a.litertlm {'a' * 12} (card.json {'c' * 12})"


def test_the_readme_metadata_passes_the_hubs_validation_and_crafted_metadata_does_not(tmp_path):
    lin = Lineage(tmp_path)
    honest(lin)
    facts = model_facts(lin.res, "tiny")
    card, md, _ = compose(facts, {}, DEVICES)
    text = readme(card, facts, {}, md)
    assert readme_metadata_errors(text) == []
    assert "license: other\nlicense_name: generated-test-model\n" in text  # a generated model has no license id
    assert readme_metadata_errors(text.replace("license_name: generated-test-model\n", "")) == [
        '"license_name" is required when "license" is "other"']
    assert readme_metadata_errors(text.replace("tags:\n", "tags: 3\nx:\n", 1))[0] == '"tags" must be a list of strings'
    assert readme_metadata_errors("---\n[1, 2\n---\n")[0].startswith("YAML")
