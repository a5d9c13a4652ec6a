"""Where `farm publish` / the card flow's `publish_to` goes: hf://OWNER/REPO (the folder staged
under FARM_HOME/published/hf/…, then uploaded) or a folder (relative, as the UI's form gives it:
under FARM_HOME/published; absolute, as the CLI resolves a user's path: as it is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm.publishing.folder import write_folder
from farm.publishing.hub import hub_repo, publish_to_hub, staging_dir
from farm.resources import Resources


def folder_of(home: Path, to: str) -> Path:
    """The local folder a target is written to (and `--check` reads)."""
    repo_id = hub_repo(to)
    if repo_id is not None:
        return staging_dir(home, repo_id)
    p = Path(to).expanduser()
    return p if p.is_absolute() else Path(home) / "published" / p


def publish(res: Resources, model: str, to: str, card_cfg: dict[str, Any] | None = None,
            dry_run: bool = False) -> dict[str, Any]:
    """The repository written to its folder, and uploaded when the target is the hub."""
    repo_id = hub_repo(to)
    if repo_id is not None:
        return publish_to_hub(res, model, repo_id, card_cfg, dry_run=dry_run)
    return write_folder(res, model, folder_of(res.settings.home, to), card_cfg)
