from prefect import task
from prefect.cache_policies import NO_CACHE

from farm.cards.publish import render_card
from tasks.common import begin, resources


@task(name="card", cache_policy=NO_CACHE, task_run_name="card {model}")
def card_task(model: str, card_cfg: dict | None = None, out_dir: str | None = None):
    """Render, check and publish a model's card from lineage (never cached: lineage moves on with
    every measurement). Returns the render's result; raises BadInput when a check fails."""
    from pathlib import Path

    begin("card", model)
    return render_card(resources(), model, card_cfg, Path(out_dir) if out_dir else None, publish=True)


@task(name="publish", cache_policy=NO_CACHE, task_run_name="publish {model} to {to}")
def publish_task(model: str, to: str, card_cfg: dict | None = None, dry_run: bool = False):
    """Write the model's repository folder (farm/publishing/folder.py): the card, every current
    file verified against lineage, the manifest and REPRODUCE.md; to an hf://OWNER/REPO target,
    then upload it as one commit (farm/publishing/hub.py)."""
    from farm.publishing.folder import write_folder
    from farm.publishing.hub import hub_repo, publish_to_hub

    begin("publish", model)
    res = resources()
    if (repo_id := hub_repo(to)) is not None:
        return publish_to_hub(res, model, repo_id, card_cfg, dry_run=dry_run)
    return write_folder(res, model, publish_dir(res.settings.home, to), card_cfg)


def publish_dir(home, to: str):
    """A folder given relative (the UI's form) lies under FARM_HOME/published; an absolute one is
    taken as it is (the CLI resolves the user's path)."""
    from pathlib import Path

    p = Path(to).expanduser()
    return p if p.is_absolute() else Path(home) / "published" / p
