"""The build pipeline, written once: what a build is (`Job`), the checks before any work
(`preflight`), and the stages in order (`STAGES`, run by `run_stages`).

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

from farm.config import BuildConfig, LocalSource, load_config
from farm.errors import BadInput, BuildFailed
from farm.families import get_family
from farm.leftovers import sweep_farm
from farm.progress import Progress, stderr_progress
from farm.recipes import RECIPES_DIR, Recipe, load_recipe
from farm.resources import Resources
from farm.refusals import recorded_peak
from farm.source_folder import validate_folder
from farm.stages.common import StageResult
from farm.export_settings import export_config
from farm.stages.convert import check_export_options, convert
from farm.stages.hash import hash_bundle
from farm.stages.package import package
from farm.stages.quantize import check_recipe, quantize, vision_recipe
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
            rcp = recorded_recipe(res, cfg.recipe) if res is not None else None
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


def recorded_recipe(res: Any, name: str) -> Recipe | None:
    """The recipe lineage recorded under `name` (None where there is none or `name` is a path)."""
    from farm.lineage.queries.artifacts import recipe_by_name

    if name.endswith((".yaml", ".yml")) or "/" in name:
        return None
    with res.db.session() as s:
        found = recipe_by_name(s, name)
    if found is None:
        return None
    rcp = Recipe.model_validate(found["body"])
    if rcp.digest() != found["digest"]:  # a body this code reads otherwise is not that recipe
        return None
    return rcp


def command_line(config_path: str, recipe: str) -> str:
    """The command line that builds these bytes, as a user would type it from the repository."""
    import os

    try:
        shown = os.path.relpath(config_path)
    except ValueError:
        shown = config_path
    if shown.startswith(".."):
        shown = config_path
    return f"farm build {shown} --recipe {recipe}"


def preflight(res: Resources, job: Job, gates: bool = True) -> None:
    """Everything a build can be refused for before its first stage: the family (an image build of
    one without a vision export), the store (an S3 endpoint and bucket), the toolchain env, a stage
    the family is known to fail with the installed tools, a local source folder (the refusals, a
    tokenizer, an end-of-sequence id), the export options as the installed litert-torch declares
    them, the recipe as the installed quantizer judges it, and (when gates run) every enabled CPU
    class this host must present (farm/devices/classes.py). The pipeline's own checks come first,
    then each other room's once (the export options computed once for the folder and the converter)."""
    check_vision(job.config)
    res.store.exists("0" * 64)  # reaches the store (an S3 endpoint, a bucket) before any work
    res.toolchain.require()
    check_known_failures(res, job)
    options = export_config(job.config)["options"]
    if isinstance(job.config.source, LocalSource):
        validate_folder(job.config.source.path, job.config.family, recorded_peak(res, options))
    check_export_options(res, job.config.name, options)
    check_recipe(res, job.recipe)
    if job.config.vision is not None:
        check_recipe(res, vision_recipe(job.config))
    if gates:
        from farm.devices.classes import class_targets

        class_targets(res)  # a class this host cannot present and the registry requires: one line, exit 2


def check_vision(cfg: BuildConfig) -> None:
    """An image build (`vision:`) only for a family whose vision encoder litert-torch exports."""
    from farm.errors import BadInput
    from farm.families import FAMILIES

    family = get_family(cfg.family)
    if cfg.vision is not None and not family.vision:
        with_vision = ", ".join(f.name for f in FAMILIES if f.vision) or "none"
        raise BadInput(f"config {cfg.name!r}: family {family.name!r} has no vision encoder that litert-torch "
                       f"exports (families with one: {with_vision}): remove `vision:` to build the text decoder")


def check_known_failures(res: Resources, job: Job) -> None:
    """A stage the family matrix measured failing for this family with the installed tool version is
    refused before any work (issue 18: a user learns it before a 20-minute download, not after), and
    the refusal is on record for `farm families`. FARM_MEASURE_KNOWN_FAILURES (`farm build
    --measure-known-failures`; `farm families --build` sets it) builds anyway, to measure it again."""
    from farm.refusals import Refused

    family = get_family(job.config.family)
    if res.settings.measure_known_failures or not family.known_failures:
        return
    installed = res.toolchain.identity["packages"]
    stages = {s.name: s for s in STAGES}
    for known in family.known_failures:
        if known.where in stages and known.applies(installed):
            exc = Refused("known_failure",
                          f"family {family.name} fails in the {known.where} stage with {known.tool} "
                          f"{installed.get(known.tool)}: {known.reason} (measured {known.measured})",
                          f"use a {known.tool} release after {installed.get(known.tool)} (farm toolchain), or pass "
                          "--measure-known-failures to build it anyway and record what happens")
            record_failure(res, job, stages[known.where], exc, {})
            raise exc


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
