"""`farm publish MODEL --to hf://OWNER/REPO`: the repository folder (folder.py), written under
FARM_HOME/published/hf/OWNER/REPO, then uploaded to the Hugging Face hub by the toolchain's
`hub_upload` (huggingface_hub lives in the toolchain env; the token and endpoint come from the
user's environment: HF_TOKEN, HF_ENDPOINT) as one commit whose message names every file's sha256.
A dry run writes the folder without recording the card and lists what the commit would add, update
and delete."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from farm.errors import BadInput
from farm.publishing.folder import write_folder
from farm.publishing.repo_files import MANIFEST
from farm.resources import Resources

PREFIX = "hf://"
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
# What the farm owns in a repository it publishes to: a remote file like these that the new folder
# does not have (a file no longer current, an old recipe's inputs) is deleted in the same commit;
# anything else a user added by hand (.gitattributes, extra docs) is left alone.
MANAGED = (".litertlm", "reproduce/", "frontier.png", MANIFEST)


def hub_repo(target: str) -> str | None:
    """OWNER/REPO of an hf:// target, None for a folder; BadInput for a malformed one."""
    if not target.startswith(PREFIX):
        return None
    repo = target[len(PREFIX):].strip("/")
    if not _REPO.match(repo):
        raise BadInput(f"--to {target}: a hub target is hf://OWNER/REPO (letters, digits, '-', '_', '.')")
    return repo


def staging_dir(home: Path, repo_id: str) -> Path:
    return Path(home) / "published" / "hf" / repo_id


def commit_message(model_id: str, repo: dict[str, Any]) -> str:
    files = [f for f in repo["files"] if f["path"].endswith(".litertlm")]
    return (f"farm publish {model_id}: " + ", ".join(f"{f['path']} {f['sha256'][:12]}" for f in files)
            + f" (card.json {repo['card_sha256'][:12]})")


def publish_to_hub(res: Resources, model: str, repo_id: str, card_cfg: dict[str, Any] | None = None,
                   dry_run: bool = False) -> dict[str, Any]:
    """{"model_id", "repo_id", "dir", "files", "add", "update", "delete", "unchanged", "commit", "commit_url"}."""
    folder = staging_dir(res.settings.home, repo_id)
    repo = write_folder(res, model, folder, card_cfg, record=not dry_run)
    message = commit_message(repo["model_id"], repo)
    plan = res.toolchain.call("hub_upload", {"folder": str(folder), "repo_id": repo_id, "message": message,
                                             "dry_run": dry_run, "managed": list(MANAGED)})
    return {**repo, "repo_id": repo_id, "message": message, "dry_run": dry_run,
            **{k: plan.get(k) for k in ("add", "update", "delete", "unchanged", "commit", "commit_url", "repo_exists")}}
