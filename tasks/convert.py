from prefect import task
from prefect.cache_policies import NO_CACHE

from farm.config import BuildConfig
from farm.stages.convert import convert
from farm.stages.source import SourceResult
from tasks.common import begin, finish, progress, resources


@task(name="convert", cache_policy=NO_CACHE)
def convert_task(cfg: BuildConfig, source: SourceResult):
    begin("stage", "convert")
    return finish(convert(resources(), cfg, source, progress()))
