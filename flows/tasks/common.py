from __future__ import annotations

import re
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

from prefect import get_run_logger
from prefect.states import Completed, State

from farm.resources import Resources, get_resources

if TYPE_CHECKING:
    from farm.devices import Device


def resources() -> Resources:
    return get_resources()


def progress() -> Callable[[str], None]:
    """Where the toolchain's output goes: the run's log at DEBUG (the Prefect UI and the command's
    log file keep it; the terminal shows it only with `farm -v`)."""
    logger = get_run_logger()
    return logger.debug


# A sweep's toolchain line per group scored: "[toolchain] int8: 14/62 layer6.attention: KL …".
_SWEPT = re.compile(r"(?P<treatment>[^\s:]+): (?P<done>\d+)/(?P<total>\d+) (?P<group>[^\s:]+):")


def sweep_progress() -> Callable[[str], None]:
    """`progress`, and the group a sensitivity sweep has just scored as the terminal's spinner text
    ("stage sensitivity int8 14/62 layer6.attention …"): a sweep is minutes of one toolchain call."""
    log = progress()

    def report(line: str) -> None:
        log(line)
        m = _SWEPT.search(line)
        if m:
            begin("stage", f"sensitivity {m['treatment']} {m['done']}/{m['total']} {m['group']}")

    return report


def begin(kind: str, name: str) -> None:
    """A progress event: this stage / gate / device started (farm/ops/console.py)."""
    from farm.ops.console import started

    started(kind, name)


def finish(result: Any) -> State:
    """Finish the task as "Cached" when the farm's cache answered, so the UI tells runs apart."""
    from farm.ops.console import emit

    logger = get_run_logger()
    logger.info("%s %s in %.2fs", result.name, result.status, result.seconds)
    emit("stage", result.name, result.status, result.seconds)
    return Completed(data=result, name="Cached" if result.status == "cached" else "Completed")


def ensure_concurrency_limit(name: str, limit: int) -> None:
    """Create a Prefect global concurrency limit on first use (an operator's later change in the UI
    is kept)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=limit))
            except Exception:  # noqa: BLE001 - another process created it first
                client.read_global_concurrency_limit_by_name(name)


def slot_name(device: Device) -> str:
    import re
    import socket

    from farm.devices.runners import RUNNERS

    if RUNNERS.get(device.runner.kind).this_host:
        return f"device-{device.id}-on-{re.sub(r'[^A-Za-z0-9_-]', '_', socket.gethostname())[:60]}"
    return f"device-{device.id}"


@contextmanager
def device_slot(device: Device, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the device's one slot (the Prefect global concurrency limit `device-<id>`, limit 1,
    created on first use) while benchmarking it: across processes and hosts, one run per device.
    A device of this host's own (local-cpu, a CPU class) is one per host: its slot is
    `device-<id>-on-<host>`, so one host's CPU never waits for another's."""
    from prefect.concurrency.sync import concurrency

    name = slot_name(device)
    ensure_concurrency_limit(name, 1)
    # The slot is a lease Prefect's client renews while this process lives; a holder killed
    # mid-run (kill -9 of its worker) stops renewing and the server frees the slot after the
    # lease's duration: 60 s here instead of Prefect's 300, so a re-run is not locked out for 5 min.
    with concurrency(name, occupy=1, timeout_seconds=timeout_s, strict=True, lease_duration=60):
        yield
