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
from flows.tasks.common import sweep_progress
from flows.tasks.stages import run_as_task


@task(name="sensitivity", cache_policy=NO_CACHE)
def _sweep(job: Job, treatments: list[str], overrides: dict[str, str], positions: int, only_groups: list[str] | None,
           fresh: bool) -> dict[str, Any]:
    from farm.ops.console import emit, started
    from farm.tuning.sensitivity import measure_sweeps

    started("stage", "sensitivity")
    import time

    t0 = time.monotonic()
    report = measure_sweeps(get_resources(), job, parse_treatments(treatments),
                            {g: parse_treatment(t) for g, t in overrides.items()}, positions=positions,
                            only_groups=only_groups, fresh=fresh, progress=sweep_progress(), run=run_as_task)
    reused = all(s["reused"] for s in report["sweeps"])
    emit("stage", "sensitivity", "reused" if reused else "ran", round(time.monotonic() - t0, 2),
         f"{len(report['groups'])} groups × {len(report['sweeps'])} treatment(s)")
    return report


@flow(name="sensitivity")
def sensitivity(config_path: str, treatments: list[str], overrides: dict[str, str] | None = None,
                positions: int = 2048, only_groups: list[str] | None = None, fresh: bool = False,
                source_grid: bool = False) -> dict[str, Any]:
    """Each treatment on every op group of CONFIG's float export (a source-grid export when
    source_grid), each group scored alone on the held-out text; the table is kept as the markdown
    artifact sensitivity-<model>."""
    from farm.tuning.sensitivity import table

    job = Job.load(config_path).with_source_grid(source_grid)
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


@flow(name="tune")
def tune(config_path: str, max_kl: float, min_top1: float, max_bytes_per_param: float | None = None,
         treatments: list[str] | None = None, recipe_path: str | None = None, max_tries: int = 4,
         positions: int = 2048, source_grid: bool = False) -> dict[str, Any]:
    """A recipe for CONFIG with the least bytes whose measured KL and top-1 on the held-out text meet
    the target and whose bundle passes every gate (searched over a source-grid export when
    source_grid: its recipe holds the source's 4-bit grid); the search is kept as the markdown
    artifact tune-<model>."""
    from pathlib import Path

    from farm.recipes import RECIPES_DIR
    from farm.recipes.treatments import DEFAULT_TUNE
    from farm.tuning.search import Target
    from farm.tuning.tune import tune as tune_recipe
    from flows.build import build
    from flows.common import run_flow

    job = Job.load(config_path).with_source_grid(source_grid)
    out = Path(recipe_path) if recipe_path else RECIPES_DIR / f"{job.config.model_id}-tuned.yaml"

    def build_candidate(path: Path) -> dict[str, Any]:
        return run_flow(build, config_path, str(path), run_gates=True, run_bench=False)

    result = tune_recipe(get_resources(), job, config_path, Target(max_kl, min_top1, max_bytes_per_param),
                         parse_treatments(list(treatments or DEFAULT_TUNE)), out, build_candidate,
                         max_tries=max_tries, positions=positions, progress=sweep_progress(), run=run_as_task)
    rows = "\n".join(
        f"| {c['try']} | {c.get('bytes_per_param') or 0:.3f} | {c['kl']:.4g} | {c['top1']:.3f} | {c.get('gates') or '-'} | "
        f"{c.get('verdict', '')} |" for c in result["candidates"])
    create_markdown_artifact(
        key=f"tune-{result['model_id']}".replace("_", "-").replace(".", "-"),
        markdown=f"# {result['model_id']}: recipe search — {result['status']}\n\n{result.get('reason') or ''}\n\n"
                 f"| try | bytes/param | KL | top-1 | gates | verdict |\n|---|---|---|---|---|---|\n{rows}\n",
        description=result["status"])
    return result
