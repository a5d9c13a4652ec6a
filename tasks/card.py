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
