from prefect import task
from prefect.cache_policies import NO_CACHE

from farm.config import BuildConfig
from farm.stages.source import resolve_source
from tasks.common import begin, finish, progress, resources


@task(name="source", cache_policy=NO_CACHE)
def source_task(cfg: BuildConfig):
    begin("stage", "source")
    return finish(resolve_source(resources(), cfg, progress()))
