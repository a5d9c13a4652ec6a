import time

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from farm.devices import load_registry
from farm.devices.bench import bench_device
from farm.resources import get_resources
from farm.summary import device_event
from flows.tasks.common import begin, device_slot, resources


@task(name="bench-device", cache_policy=NO_CACHE, task_run_name="bench {device_id} {sha256:.12}")
def bench_device_task(sha256: str, device_id: str, runtime: str | None = None, reuse: bool = False) -> list[dict]:
    """Every accelerator of one device, one run at a time; each run recorded (failures too); with
    `reuse`, a recorded result of the same bytes and protocol stands (farm/devices/bench.py)."""
    from farm.ops.console import emit

    begin("device", device_id)
    device = load_registry().get(device_id)
    with device_slot(device, timeout_s=device.protocol.timeout_s * 4):
        t0 = time.monotonic()
        res = resources() if runtime is None else get_resources(runtime)  # that release's litert-lm CLI
        records = bench_device(res, sha256, device, flow_run_id=flow_run.id, reuse=reuse)
    for r in records:
        ev = device_event(device_id, r, time.monotonic() - t0)
        emit("device", ev["name"], ev["status"], ev["seconds"], ev["detail"])
    return records
