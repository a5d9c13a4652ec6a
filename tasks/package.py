from prefect import task
from prefect.cache_policies import NO_CACHE

from farm.config import BuildConfig
from farm.recipes import Recipe
from farm.stages.common import StageResult
from farm.stages.package import package
from farm.stages.source import SourceResult
from tasks.common import begin, finish, progress, resources


@task(name="package", cache_policy=NO_CACHE)
def package_task(cfg: BuildConfig, recipe: Recipe, source: SourceResult, model: StageResult,
                 build_command: str | None = None):
    begin("stage", "package")
    return finish(package(resources(), cfg, recipe, source, model, progress(), build_command=build_command))
