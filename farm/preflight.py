"""The checks before any work: everything a build can be refused for before its first stage, in
one pass (the CLI runs it before Prefect starts, so bad input fails fast and writes nothing; the
build flow runs it again for a build started from the UI or a worker; a rebuild before its scratch
stages)."""

from __future__ import annotations

from farm.config import BuildConfig, LocalSource
from farm.export_settings import export_config
from farm.families import get_family
from farm.pipeline import STAGES, Job, record_failure
from farm.refusals import recorded_peak
from farm.resources import Resources
from farm.source_folder import validate_folder
from farm.stages.convert import check_export_options
from farm.stages.quantize import check_recipe, vision_recipe


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
