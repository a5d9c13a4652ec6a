"""The card flow: render a model's card from lineage, check it, publish it (store + lineage) and
keep it as a Prefect markdown artifact keyed `card-<model id>`, so the UI holds its version
history. The build flow ends with the same task."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from farm.ops.console import emit
from farm.errors import CardRefused
from flows.tasks.card import card_task, publish_task


def artifact_key(model_id: str) -> str:
    """Prefect artifact keys are lower-case letters, digits and dashes."""
    import re

    return "card-" + re.sub(r"[^a-z0-9-]+", "-", model_id.lower()).strip("-")


def publish_card(model: str, card_cfg: dict | None = None, out_dir: str | None = None) -> dict[str, Any]:
    """Inside a flow: the card task, then its markdown artifact. A card that fails a check is not
    published; the result says why ({"published": False, "failures": [...]}) instead of raising,
    so a build still reports its gates and devices."""
    state = card_task(model, card_cfg, out_dir, return_state=True)
    try:
        out = state.result()
    except CardRefused as exc:
        emit("card", model, "not published", None, f"{len(exc.failures)} failure(s): farm card {model} --check")
        return {"published": False, "error": str(exc), "failures": exc.failures}
    new = out.get("new", True)
    emit("card", out["model_id"], "published" if new else "unchanged", None, out["card_sha256"][:12])
    if new:  # the UI's version history gets a version when the card changed
        create_markdown_artifact(key=artifact_key(out["model_id"]), markdown=out["markdown"],
                                 description=f"card.json {out['card_sha256']}")
    return {"published": True, "unchanged": not new, "model_id": out["model_id"], "card_sha256": out["card_sha256"],
            "files": out["files"], "uris": out.get("uris", {})}


@flow(name="card")
def card(model: str, out_dir: str | None = None, card_cfg: dict | None = None, publish_to: str | None = None,
         dry_run: bool = False):
    """publish_to: also write the model repository a user uploads (README.md with Hugging Face
    metadata, the files, litertlm_manifest.json, REPRODUCE.md) into this folder (relative: under
    FARM_HOME/published), or upload it to hf://OWNER/REPO as one commit (dry_run: list what the
    commit would change)."""
    if dry_run and publish_to:
        out = {"published": False, "model_id": model}
    else:
        out = publish_card(model, card_cfg, out_dir)
        if not out["published"]:
            raise CardRefused(model, out["failures"])
    if publish_to:
        repo = publish_task(model, publish_to, card_cfg, dry_run)
        if "repo_id" in repo:
            changed = len(repo["add"] or []) + len(repo["update"] or []) + len(repo["delete"] or [])
            emit("publish", repo["repo_id"], "dry run" if dry_run else "committed" if repo["commit"] else "unchanged",
                 None, f"{changed} file(s) to change" if dry_run else (repo["commit"] or "")[:12])
        else:
            emit("publish", out["model_id"], "written", None, f"{len(repo['files'])} file(s) in {repo['dir']}"
                 + (f", {len(repo['removed'])} removed" if repo["removed"] else ""))
        out["repository"] = repo
    return out
