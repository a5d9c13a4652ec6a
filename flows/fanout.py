"""Device fan-out: one benchmark task per registered device, in parallel across devices, one run at
a time per device. A device that fails (unreachable, crashed) fails its own cell, recorded with its
failure class, never the fan-out.

This runs the devices reachable from this process (local, ssh, adb on this host). Serving devices
wired to other hosts through per-device Prefect work pools and workers (`run_deployment`) is the next
step (see docs/architecture.md)."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from farm.devices import load_registry
from tasks.bench import bench_device_task


@flow(name="fanout", task_runner=ThreadPoolTaskRunner(max_workers=8))
def fanout(sha256: str, devices: list[str] | None = None) -> list[dict[str, Any]]:
    reg = load_registry()
    targets = [reg.get(d) for d in devices] if devices else reg.enabled()
    futures = {d.id: bench_device_task.submit(sha256, d.id) for d in targets}
    records: list[dict[str, Any]] = []
    log = get_run_logger()
    for device_id, fut in futures.items():
        try:
            records.extend(fut.result())
        except Exception as exc:  # noqa: BLE001 - one device's crash is its own cell
            log.warning("device %s could not be benchmarked: %s", device_id, exc)
            records.append({"device_id": device_id, "status": "failed", "failure_class": "device_error",
                            "evidence": [str(exc)], "artifact_sha256": sha256})
    return records
