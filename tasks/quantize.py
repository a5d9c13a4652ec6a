from prefect import task
from prefect.cache_policies import NO_CACHE

from farm.config import BuildConfig
from farm.recipes import Recipe
from farm.stages.common import StageResult
from farm.stages.quantize import quantize
from tasks.common import begin, finish, progress, resources


@task(name="quantize", cache_policy=NO_CACHE)
def quantize_task(cfg: BuildConfig, recipe: Recipe, float_export: StageResult):
    begin("stage", "quantize")
    return finish(quantize(resources(), cfg, recipe, float_export, progress()))
