"""The build pipeline, written once: what a build is (`Job`) and the stages in order (`STAGES`, run
by `run_stages`); the checks before any work are farm/preflight.py.

Prefect-free. Three callers run it: the build flow runs each stage as a Prefect task
(flows/build.py: the UI shows source → convert → quantize → package → hash), the rebuild runs the
stages as plain calls in a scratch farm (farm/rebuild.py), and the CLI runs the checks before
Prefect starts, so bad input fails fast and writes nothing (farm_cli/building.py; the flow runs them
again for a build started from the UI or a worker: the quantizer's answer is remembered, the rest
reads a few small files).

A stage is a plain function of (resources, the job, the outputs so far, progress) that returns a
StageResult (farm/stages/<stage>.py, each cached by content in the lineage DB)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from farm.config import BuildConfig, command_line, load_config
from farm.errors import BadInput, BuildFailed
from farm.leftovers import sweep_farm
from farm.progress import Progress, stderr_progress
from farm.recipes import RECIPES_DIR, Recipe, load_recipe
from farm.resources import Resources
from farm.stages.common import StageResult
from farm.stages.convert import convert
from farm.stages.hash import hash_bundle
from farm.stages.package import package
from farm.stages.quantize import quantize
from farm.stages.source import SourceResult, resolve_source


@dataclass(frozen=True)
class Job:
    """What one build makes: the validated config, its recipe, and the command line that builds it
    (recorded with the bundle, for its card)."""

    config: BuildConfig
    recipe: Recipe
    build_command: str | None = None

    @classmethod
    def load(cls, config_path: str | Path, recipe: str | None = None, res: Resources | None = None) -> "Job":
        """The config and recipe, validated (bad input names what is wrong; nothing runs). With `res`,
        a recipe name this checkout lacks is the newest one lineage recorded under that name (a
        recipe `farm tune` wrote on another host, or one from another checkout)."""
        cfg = load_config(config_path).with_recipe(recipe)
        try:
            rcp = load_recipe(cfg.recipe, RECIPES_DIR)
        except BadInput:
            rcp = None
            if res is not None and not cfg.recipe.endswith((".yaml", ".yml")) and "/" not in cfg.recipe:
                from farm.lineage.queries.artifacts import recorded_recipe

                with res.db.session() as s:
                    rcp = recorded_recipe(s, cfg.recipe)
            if rcp is None:
                raise
        # The recipe's allowances (declared, or its class's defaults) under the config's own gate
        # settings: what the gates judge these bytes by, recorded with the bundle and every result.
        allowed = rcp.allowances_in_force()["allowances"].gate_settings()
        cfg = cfg.model_copy(update={"gates": cfg.gates.with_defaults(allowed)})
        return cls(config=cfg.for_recipe(rcp), recipe=rcp, build_command=command_line(str(config_path), rcp.name))


    def with_source_grid(self, on: bool) -> "Job":
        """This job over a source-grid float export (farm_toolchain/grid.py) or a plain one."""
        return replace(self, config=self.config.with_source_grid(on))


Outputs = dict[str, Any]  # stage name -> its result, in the order the stages ran


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Resources, Job, Outputs, Progress], StageResult | SourceResult]
    tool: str = "farm"  # the package whose work the stage is: what a recorded failure names


STAGES: tuple[Stage, ...] = (
    Stage("source", lambda res, job, done, progress: resolve_source(res, job.config, progress), "transformers"),
    Stage("convert", lambda res, job, done, progress: convert(res, job.config, done["source"], progress),
          "litert-torch"),
    Stage("quantize", lambda res, job, done, progress: quantize(res, job.config, job.recipe, done["convert"], progress),
          "ai-edge-quantizer"),
    Stage("package", lambda res, job, done, progress: package(res, job.config, job.recipe, done["source"],
                                                              done["quantize"], progress, job.build_command),
          "litert-lm-builder"),
    Stage("hash", lambda res, job, done, progress: hash_bundle(res, done["package"])),
)

# How a caller runs one stage: (stage, job, outputs so far) -> its result.
StageRunner = Callable[[Stage, Job, Outputs], Any]


def run_stages(res: Resources, job: Job, run: StageRunner | None = None,
               progress: Progress = stderr_progress, until: str | None = None) -> Outputs:
    """Every stage in order (or up to and including `until`: a sensitivity sweep needs only the
    float export), each given the outputs before it; what killed builds left behind is swept first
    (farm/leftovers.py). `run` is how a stage is run (default: a plain call)."""
    if until is not None and until not in {s.name for s in STAGES}:
        raise ValueError(f"no stage {until!r}")
    sweep_farm(res)
    call = run or (lambda stage, job_, done: stage.run(res, job_, done, progress))
    done: Outputs = {}
    for stage in STAGES:
        try:
            done[stage.name] = call(stage, job, dict(done))
        except BuildFailed as exc:
            record_failure(res, job, stage, exc, done)
            raise
        if stage.name == until:
            break
    return done


def record_failure(res: Resources, job: Job, stage: Stage, exc: BaseException, done: Outputs) -> None:
    """A stage that failed for a reason other than bad input, on record (issue 18: the family
    matrix names what fails): the stage, its tool and that tool's version in this toolchain, the
    tool's one-line reason and this command's log. Recording is best effort: the build's own error
    is what the user must see, not a second one from a lineage that cannot be written."""
    from farm.ops.console import current_log
    from farm.lineage.record import record_stage_failure

    try:
        versions = res.toolchain.identity["packages"]
        source = done.get("source")
        with res.db.session() as s:
            record_stage_failure(
                s, model_id=job.config.name, family=job.config.family, recipe_name=job.recipe.name,
                recipe_digest=job.recipe.digest(), source_id=getattr(source, "source_id", None), stage=stage.name,
                tool=stage.tool, tool_version=versions.get(stage.tool), toolchain_id=res.toolchain_id,
                error=str(exc)[:4000], log_path=current_log())
    except Exception:  # noqa: BLE001 - see the docstring
        import logging

        logging.getLogger(__name__).warning("could not record the %s failure in lineage", stage.name, exc_info=True)


def bundle_of(done: Outputs) -> StageResult:
    """The bundle a run of the stages made (the package stage's output)."""
    return done["package"]


def build_summary(job: Job, done: Outputs) -> dict[str, Any]:
    """The bundle and its stages; the gates, devices and card are added as they run."""
    bundle = bundle_of(done)
    return {
        "config": job.config.name,
        "recipe": job.recipe.name,
        "artifact": {k: bundle.artifact.model_dump()[k] for k in ("sha256", "uri", "size")},
        "stages": [{"name": s.name, "status": s.status, "seconds": s.seconds} for s in done.values()],
    }
