from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from farm.devices import load_registry
from farm.stages.bench import bench_device
from tasks.common import resources


@task(name="bench-device", cache_policy=NO_CACHE, task_run_name="bench {device_id} {sha256:.12}")
def bench_device_task(sha256: str, device_id: str) -> list[dict]:
    """Every accelerator of one device, one run at a time; each run recorded (failures too)."""
    return bench_device(resources(), sha256, load_registry().get(device_id), flow_run_id=flow_run.id)
