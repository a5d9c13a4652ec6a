"""The pipeline's stages as Prefect tasks, one per stage of farm/pipeline.py (named for it, so the
UI shows source → convert → quantize → package → hash), each a thin wrapper over the stage's plain
function."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from farm.pipeline import STAGES, Job, Outputs, Stage
from flows.tasks.common import begin, finish, progress, resources


def _task(stage: Stage):
    @task(name=stage.name, cache_policy=NO_CACHE)
    def run(job: Job, done: Outputs):
        begin("stage", stage.name)
        return finish(stage.run(resources(), job, done, progress()))

    return run


STAGE_TASKS = {stage.name: _task(stage) for stage in STAGES}


def run_as_task(stage: Stage, job: Job, done: Outputs):
    """A farm.pipeline.StageRunner: the stage as its Prefect task; its result (the task finishes in
    a state named "Cached" or "Completed")."""
    return STAGE_TASKS[stage.name](job, done, return_state=True).result()
