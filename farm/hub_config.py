"""A build config for a hub repository, written from what the hub says (issue 18, item 3-4).

`farm build --hub REPO[@REV]` and the UI's `build-hub` form need no YAML written by hand: the hub's
answer (`hub_info`: model_info and config.json, before any weight is downloaded) goes through the
farm's refusals (gated, remote code, pre-quantized, no weights, too large for this worker: one line,
nothing downloaded), its `architectures` name the family, the revision is pinned to the commit the
hub answered, and the config is written under FARM_HOME/configs/ (where a user keeps configs: the
UI's build form lists them). The build then runs on that file like any other."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from farm.errors import BadInput
from farm.resources import Resources

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def parse_ref(ref: str) -> tuple[str, str]:
    """'org/name@rev' -> (repo id, revision); the revision defaults to main (pinned when resolved)."""
    repo_id, _, revision = ref.strip().partition("@")
    if not _REPO.match(repo_id):
        raise BadInput(f"--hub {ref!r} is not a Hugging Face model id: give org/name, or org/name@commit")
    return repo_id, revision or "main"


def hub_config(res: Resources, repo_id: str, revision: str = "main", recipe: str | None = None) -> Path:
    """The config file for `repo_id` at the commit `revision` resolves to, written under
    FARM_HOME/configs/ (refused or bad input: nothing written)."""
    from farm.families import family_architectures, family_names, family_of
    from farm.refusals import check_source, hub_facts, recorded_peak

    info = res.toolchain.call("hub_info", {"repo_id": repo_id, "revision": revision,
                                           "cache_dir": str(res.settings.cache / "hf")})
    if "answer" not in info:
        raise BadInput(f"the hub cannot be reached ({info.get('offline', 'offline')}): --hub asks it which commit "
                       f"and family {repo_id}@{revision} is; write a config naming both to build a cached snapshot")
    check_source(hub_facts(info["answer"], info["config"], family_architectures(), recorded_peak(res)))
    architectures = info["config"].get("architectures")
    family = family_of(architectures if isinstance(architectures, list) else None)
    if family is None:  # the refusals name an architecture no family covers; this is the rest
        raise BadInput(f"{repo_id}@{revision}: config.json names no architecture a family converts "
                       f"({architectures}; supported families: {', '.join(family_names())})")
    commit = info["answer"]["sha"]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", repo_id.split("/")[-1]).strip("-.") or "model"
    body: dict[str, Any] = {"name": name, "family": family.name,
                            "source": {"kind": "hf", "repo_id": repo_id, "revision": commit}}
    if recipe:
        body["recipe"] = recipe
    folder = res.settings.home / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    tmp = path.with_suffix(f".tmp{id(body)}")
    tmp.write_text(f"# written by farm build --hub {repo_id}@{revision} (the hub answered commit {commit})\n"
                   + yaml.safe_dump(body, sort_keys=False))
    tmp.replace(path)
    return path
