"""The recipe-finding flows: `sensitivity` (what quantizing each op group costs, farm/tuning/
sensitivity.py) and `tune` (a recipe search to a quality target, farm/tuning/tune.py). The float
export's stages run as their Prefect tasks (cached by content), so the UI shows source → convert
→ the measurement."""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from farm.pipeline import Job
from farm.recipes.treatments import parse_treatment, parse_treatments
from farm.resources import get_resources
from tasks.common import progress
from tasks.stages import run_as_task


@task(name="sensitivity", cache_policy=NO_CACHE)
def _sweep(job: Job, treatments: list[str], overrides: dict[str, str], positions: int, only_groups: list[str] | None,
           fresh: bool) -> dict[str, Any]:
    from farm.console import emit, started
    from farm.tuning.sensitivity import measure_sweeps

    started("stage", "sensitivity")
    import time

    t0 = time.monotonic()
    report = measure_sweeps(get_resources(), job, parse_treatments(treatments),
                            {g: parse_treatment(t) for g, t in overrides.items()}, positions=positions,
                            only_groups=only_groups, fresh=fresh, progress=progress(), run=run_as_task)
    reused = all(s["reused"] for s in report["sweeps"])
    emit("stage", "sensitivity", "reused" if reused else "ran", round(time.monotonic() - t0, 2),
         f"{len(report['groups'])} groups × {len(report['sweeps'])} treatment(s)")
    return report


@flow(name="sensitivity")
def sensitivity(config_path: str, treatments: list[str], overrides: dict[str, str] | None = None,
                positions: int = 2048, only_groups: list[str] | None = None, fresh: bool = False) -> dict[str, Any]:
    """Each treatment on every op group of CONFIG's float export, each group scored alone on the
    held-out text; the table is kept as the markdown artifact sensitivity-<model>."""
    from farm.tuning.sensitivity import table

    job = Job.load(config_path)
    report = _sweep(job, treatments, overrides or {}, positions, only_groups, fresh)
    rows = table(report)[:40]
    md = "\n".join(f"| {r['group']} | {r['treatment']} | {r['kl']:.4g} | {r['top1']:.3f} | {r['saved_bytes']:,} | "
                   f"{r['kl_per_mb_saved'] if r['kl_per_mb_saved'] is None else round(r['kl_per_mb_saved'], 5)} |"
                   for r in rows)
    create_markdown_artifact(
        key=f"sensitivity-{report['model_id']}".replace("_", "-").replace(".", "-"),
        markdown=f"# {report['model_id']}: sensitivity\n\nfloat export `{report['float_sha256']}`, "
                 f"{report['positions']} held-out positions\n\n| group | treatment | KL | top-1 | bytes saved | "
                 f"KL per MB saved |\n|---|---|---|---|---|---|\n{md}\n",
        description=", ".join(treatments))
    return report
