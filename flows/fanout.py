"""Device fan-out: one benchmark task per registered device, in parallel across devices, one run at
a time per device. A device that fails (unreachable, crashed) fails its own cell, recorded with its
failure class, never the fan-out.

Two ways to reach a device:
- in this process (default): local, ssh and adb devices reachable from this host, a thread each;
- through Prefect workers (`via_workers=True`, `farm bench --workers`): each device's `bench-one`
  deployment (`farm devices deploy`) sits on the device's work pool and queue (queue concurrency 1:
  one run at a time per device); a worker on the host wired to the device pulls it. The parent waits
  for every child run and reads the results from lineage; a child that crashed or timed out fails
  its own cell (recorded here), never the fan-out."""

from __future__ import annotations

from typing import Any

import threading
from datetime import datetime, timezone

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from farm.devices import Device, load_registry
from farm.devices.classes import measures_speed, speed_targets
from farm.errors import StoreError
from farm.resources import get_resources
from farm.devices.bench import bench_device, record_device_failure
from flows.tasks.bench import bench_device_task
from flows.tasks.common import device_slot

BENCH_ONE = "bench-one"
#: A bench-one run heart-beats this often (Prefect's minimum is 30 s); one that has been silent for
#: Settings.zombie_after_s is marked Crashed by the automation `deploy_bench_one` keeps (a worker or
#: its host killed mid-run: the parent's wait ends, the device's row says so, the slot lease lapses).
HEARTBEAT_S = 30
ZOMBIE_AUTOMATION = "farm: crash bench-one runs whose worker died"


@flow(name=BENCH_ONE)
def bench_one(sha256: str, device_id: str) -> int:
    """One device, run by the worker that serves it; results go to lineage (returns their count)."""
    device = load_registry().get(device_id)
    with device_slot(device, timeout_s=device.protocol.timeout_s * 4):
        return len(bench_device(get_resources(), sha256, device, flow_run_id=flow_run.id))


def _host_down(device: Device, silent_s: float) -> str | None:
    """Why the device's host is down (no worker polled its work queue for `silent_s`, by the Prefect
    server's record), or None when a worker serves it."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            queue = client.read_work_queue_by_name(name=device.queue, work_pool_name=device.work_pool)
    except Exception:  # noqa: BLE001 - no queue: `farm deploy-devices` was not run; run_deployment says so
        return None
    polled = queue.last_polled
    if polled is not None and polled.tzinfo is None:
        polled = polled.replace(tzinfo=timezone.utc)
    age = None if polled is None else (datetime.now(timezone.utc) - polled).total_seconds()
    if age is not None and age <= silent_s:
        return None
    owner = f"host {device.host}" if device.host else "the host that serves it"
    seen = "never polled" if age is None else f"last polled {age:.0f} s ago"
    return (f"{device.id} belongs to {owner}, and no worker serves its work queue {device.work_pool}/{device.queue} "
            f"({seen}; bound {silent_s:g} s): that host or its devices worker is down, start `prefect worker start "
            f"--pool {device.work_pool} --work-queue {device.queue}` there")


def _via_worker(sha256: str, device: Device, out: dict[str, list[dict[str, Any]]]) -> None:
    from prefect.deployments import run_deployment

    from farm.lineage.queries.devices import device_results_of_run

    res = get_resources()
    started = datetime.now(timezone.utc)
    down = _host_down(device, res.settings.device_host_silent_s)
    if down is not None:  # no worker of the device's host: not queued, and no verdict on the file
        out[device.id] = [record_device_failure(res, sha256, device, "host_down", [down], started, flow_run.id,
                                                env={"host": device.host, "queue": device.queue})]
        return
    try:
        child = run_deployment(
            f"{BENCH_ONE}/{device.id}", parameters={"sha256": sha256, "device_id": device.id},
            timeout=device.protocol.timeout_s + 300, as_subflow=True,
        )
    except Exception as exc:  # noqa: BLE001 - no deployment, no API: this device's cell, recorded
        out[device.id] = [record_device_failure(
            res, sha256, device, "device_error", [f"bench-one for {device.id} could not be started: {exc}"], started,
            flow_run.id)]
        return
    with res.db.session() as s:
        rows = device_results_of_run(s, str(child.id))
    if rows:
        out[device.id] = rows
        return
    # The child never recorded anything: it crashed, was cancelled or is still queued.
    state = child.state.name if child.state else "unknown"
    cls = "timeout" if child.state is None or not child.state.is_final() else "device_error"
    why = (child.state.message or "").strip() if child.state else ""
    evidence = [f"bench-one run {child.id} for {device.id} ended {state} without a result" + (f": {why}" if why else "")]
    out[device.id] = [record_device_failure(
        res, sha256, device, cls, evidence, started, flow_run.id,
        env={"child_flow_run": str(child.id), "state": state, "state_message": why[:500] or None})]


@flow(name="fanout", task_runner=ThreadPoolTaskRunner(max_workers=8))
def fanout(sha256: str, devices: list[str] | None = None, via_workers: bool = False,
           reuse: bool = False) -> list[dict[str, Any]]:
    """Benchmark the bytes on every enabled device (or `devices`); `reuse` (a build): a device that
    already measured these bytes under its protocol is not measured again."""
    reg = load_registry()
    # An emulated CPU class reports answers, never speed or memory (farm/devices/classes.py).
    targets = [reg.get(d) for d in devices] if devices else [d for d in reg.enabled() if measures_speed(d)]
    # A device of another host runs on that host, through its work queue; this host's own here.
    remote = [d for d in targets if via_workers or d.elsewhere()]
    here = [d for d in targets if d not in remote]
    if not devices:  # a class this host cannot present, or presents as another device's, is not benchmarked
        here, left = speed_targets(get_resources(), reg, here)
        for device, why in left:
            get_run_logger().info("not benchmarked here: %s (%s)", device.id, why)
    # The bytes first: a missing or corrupt object is a store error (one line, exit 1), not every
    # device's device_error.
    get_resources().store.open_verified_path(sha256)
    got: dict[str, list[dict[str, Any]]] = {}
    threads = [threading.Thread(target=_via_worker, args=(sha256, d, got)) for d in remote]
    for t in threads:
        t.start()
    started = datetime.now(timezone.utc)
    futures = {d.id: bench_device_task.submit(sha256, d.id, reuse=reuse) for d in here}
    records: list[dict[str, Any]] = []
    log = get_run_logger()
    for device in here:
        try:
            records.extend(futures[device.id].result())
        except StoreError:
            raise  # the bytes, not the device
        except Exception as exc:  # noqa: BLE001 - one device's crash is its own cell, recorded
            log.warning("device %s could not be benchmarked: %s", device.id, exc)
            records.append(record_device_failure(get_resources(), sha256, device, "device_error",
                                                 [f"{type(exc).__name__}: {exc}"], started, flow_run.id))
    for t in threads:
        t.join()
    order = {d.id: i for i, d in enumerate(targets)}
    records += [r for d in remote for r in got.get(d.id, [])]
    return sorted(records, key=lambda r: order.get(r.get("device_id"), len(order)))


def deploy_bench_one(devices: list[Device], zombie_after_s: int) -> list[str]:
    """Register one `bench-one/<device>` deployment per device on its work pool and queue; each queue
    gets concurrency 1 (one run at a time per device). Needs PREFECT_API_URL (a real server)."""
    from pathlib import Path

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    repo = Path(__file__).resolve().parents[1]
    names = []
    with get_client(sync_client=True) as client:
        for pool in sorted({d.work_pool or "devices" for d in devices}):
            try:
                client.read_work_pool(pool)
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        for d in devices:
            queue = d.work_queue or d.id
            try:
                client.create_work_queue(name=queue, work_pool_name=d.work_pool or "devices", concurrency_limit=1)
            except ObjectAlreadyExists:
                pass
    ensure_zombie_automation(zombie_after_s)
    for d in devices:
        bench_one.from_source(source=str(repo), entrypoint="flows/fanout.py:bench_one").deploy(
            name=d.id, work_pool_name=d.work_pool or "devices", work_queue_name=d.work_queue or d.id,
            build=False, push=False, print_next_steps=False,
            job_variables={"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}},
        )
        names.append(f"{BENCH_ONE}/{d.id}")
    return names


def ensure_zombie_automation(after: int) -> None:
    """Prefect's documented zombie-run automation (docs: "detect zombie flows"), scoped to bench-one
    runs: a run that sent a heartbeat and then nothing (no heartbeat, no final state) for `after`
    seconds (Settings.zombie_after_s) is set Crashed with a message naming why. A worker killed with
    its run (kill -9, a host gone) otherwise left the run Running and the parent waiting out its
    timeout. An existing automation of another threshold is brought to this one."""
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    wanted = Automation(
        name=ZOMBIE_AUTOMATION,
        description="litertlm-farm: a bench-one run whose heartbeats stopped is Crashed (flows/fanout.py).",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification({"prefect.resource.role": "flow",
                                                 "prefect.resource.name": BENCH_ONE}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=after),
        ),
        actions=[ChangeFlowRunState(
            state=StateType.CRASHED,
            message=f"no heartbeat for {after} s: the worker running it (or its host) died "
                    f"(marked by the automation {ZOMBIE_AUTOMATION!r})",
        )],
    )
    try:
        have = Automation.read(name=ZOMBIE_AUTOMATION)
    except ValueError:  # not there yet
        wanted.create()
        return
    if have.trigger.within != wanted.trigger.within:
        wanted.id = have.id
        wanted.update()
