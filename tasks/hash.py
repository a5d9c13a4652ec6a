from prefect import task
from prefect.cache_policies import NO_CACHE

from farm.stages.common import StageResult
from farm.stages.hash import hash_bundle
from tasks.common import begin, finish, resources


@task(name="hash", cache_policy=NO_CACHE)
def hash_task(bundle: StageResult):
    begin("stage", "hash")
    return finish(hash_bundle(resources(), bundle))
