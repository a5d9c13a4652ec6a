"""`hub_upload`: a published repository folder onto the Hugging Face hub with `huggingface_hub`
(the token and endpoint from the caller's environment: HF_TOKEN, HF_ENDPOINT), as one commit.

Request: {"folder", "repo_id", "message", "dry_run": bool, "managed": [path prefixes or suffixes the
farm owns: a remote file matching one that the folder no longer has is deleted]}. Result:
{"add", "update", "delete", "unchanged": [paths], "commit": oid or None, "commit_url"}. What changes
is decided by content: a remote LFS file by its sha256, a regular one by its git blob id, so an
unchanged file is never sent and a publish that changes nothing makes no commit."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from farm_toolchain.commands import COMMANDS
from farm_toolchain.gates.common import sha256_file
from farm_toolchain.protocol import BadInput


def _local(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def _git_blob(path: Path) -> str:
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _remote(api: Any, repo_id: str) -> dict[str, dict[str, Any]] | None:
    """{path: {"sha256" or "blob"}} of the repository's main branch; None when it does not exist."""
    from huggingface_hub import errors as hf_errors
    from huggingface_hub.hf_api import RepoFile

    try:
        entries = list(api.list_repo_tree(repo_id, recursive=True))
    except hf_errors.RepositoryNotFoundError:
        return None
    out = {}
    for e in entries:
        if isinstance(e, RepoFile):
            lfs = getattr(e, "lfs", None)
            sha = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
            out[e.path] = {"sha256": sha} if sha else {"blob": e.blob_id}
    return out


@COMMANDS.register("hub_upload")
def handle(request: dict[str, Any]) -> dict[str, Any]:
    folder = Path(str(request.get("folder") or ""))
    repo_id = request.get("repo_id")
    if not folder.is_dir():
        raise BadInput(f"folder {folder} does not exist: publish into a folder first")
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise BadInput(f"repo_id must be OWNER/NAME, got {repo_id!r}")
    managed = tuple(request.get("managed") or ())
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    api = HfApi()
    local = _local(folder)
    remote = _remote(api, repo_id)
    plan: dict[str, list[str]] = {"add": [], "update": [], "unchanged": [], "delete": []}
    for rel, path in local.items():
        have = (remote or {}).get(rel)
        if have is None:
            plan["add"].append(rel)
        elif have.get("sha256") == sha256_file(path) or have.get("blob") == _git_blob(path):
            plan["unchanged"].append(rel)
        else:
            plan["update"].append(rel)
    plan["delete"] = sorted(p for p in (remote or {}) if p not in local
                            and any(p.startswith(m) or p.endswith(m) for m in managed))
    out: dict[str, Any] = {**plan, "repo_exists": remote is not None, "commit": None, "commit_url": None}
    if request.get("dry_run") or not (plan["add"] or plan["update"] or plan["delete"]):
        return out
    if remote is None:
        api.create_repo(repo_id, exist_ok=True)
    ops = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(local[rel])) for rel in plan["add"] + plan["update"]]
    ops += [CommitOperationDelete(path_in_repo=rel) for rel in plan["delete"]]
    info = api.create_commit(repo_id, operations=ops, commit_message=str(request.get("message") or "farm publish"))
    return {**out, "commit": info.oid, "commit_url": info.commit_url}
