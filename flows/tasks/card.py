from prefect import task
from prefect.cache_policies import NO_CACHE

from farm.cards.publish import render_card
from flows.tasks.common import begin, resources


@task(name="card", cache_policy=NO_CACHE, task_run_name="card {model}")
def card_task(model: str, card_cfg: dict | None = None, out_dir: str | None = None):
    """Render, check and publish a model's card from lineage (never cached: lineage moves on with
    every measurement). Returns the render's result; raises BadInput when a check fails."""
    from pathlib import Path

    begin("card", model)
    return render_card(resources(), model, card_cfg, Path(out_dir) if out_dir else None, publish=True)


@task(name="publish", cache_policy=NO_CACHE, task_run_name="publish {model} to {to}")
def publish_task(model: str, to: str, card_cfg: dict | None = None, dry_run: bool = False):
    """Write the model's repository folder, and upload it to an hf://OWNER/REPO target as one
    commit (farm/publishing/target.py)."""
    from farm.publishing.target import publish

    begin("publish", model)
    return publish(resources(), model, to, card_cfg, dry_run=dry_run)
