"""What the flows share: running a flow from the CLI (its data, failed or not), and crash hygiene."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator

from farm.leftovers import gone_here, process_tag

log = logging.getLogger(__name__)
OWNER_TAG = "farm-owner:"


def run_flow(flow: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a flow (or subflow) and return its data. A flow that records a failure (a failed gate)
    ends Failed with its summary as the state's data, which is returned; one that raised re-raises
    its exception here. A top-level run is tagged with its owner (host and pid), so the next farm
    process can tell that a run left `Running` by a killed one is dead, and mark it Crashed.

    Such a run sends no Prefect heartbeats: the engine's heartbeat thread sleeps in 1 s steps and
    is joined when the flow ends, which cost a no-op build 0.65 s of its 3.1 s (measured with
    cProfile, two joins). Heartbeats exist to find a run whose process died; for a run the CLI
    owns, the owner tag above does that (`mark_dead_runs_crashed`). Runs started by the runner or
    a worker (a deployment) keep Prefect's heartbeats.

    The tag goes on the flow runs (this one and its subflows) as each starts running, not through
    Prefect's `tags()` context: that context tags every task run too, and a tagged task run asks the
    server for a tag concurrency slot before its body runs, a round trip that took ~2 s per stage
    on the 0.8B-shape build (py-spy: the main thread in `acquire_concurrency_slots_with_lease`
    between "Created task run" and "Executing"), ~6 s of a build for a tag only flow runs need."""
    from prefect.context import FlowRunContext
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from farm.leases import process_alive
    from farm.resources import get_resources

    owned = flow.with_options(on_running=[*flow.on_running_hooks, _tag_owner])
    if FlowRunContext.get() is None:
        _start_api_serialized()
        res = get_resources()
        mark_dead_runs_crashed(res)
        # The liveness lease beats while the run works: another host reads it to crash this run if
        # this host dies (the pid check only works on one host).
        with process_alive(res), temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            state = owned(*args, return_state=True, **kwargs)
        mark_dead_runs_crashed(res)  # a host that died while this ran: its runs end Crashed now
    else:
        state = owned(*args, return_state=True, **kwargs)
    data = state.result(raise_on_failure=False)
    if isinstance(data, BaseException):
        raise data
    return data


@contextmanager
def owned_here(res: Any) -> Iterator[None]:
    """Inside a flow a worker started (a deployment run, not `run_flow`): tag the run with this
    process and hold its liveness lease while the body runs, so a worker or host that dies with the
    run leaves it to be marked Crashed by the next farm run anywhere (`mark_dead_runs_crashed`).
    A run `run_flow` started is owned already: nothing to do."""
    from prefect.context import FlowRunContext

    from farm.leases import process_alive

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is None or any(t.startswith(OWNER_TAG) for t in run.tags):
        yield
        return
    _tag_owner(None, run, None)
    with process_alive(res):
        yield


def _tag_owner(flow: Any, flow_run: Any, state: Any) -> None:
    """on_running hook: add this process's owner tag to the flow run (what `mark_dead_runs_crashed`
    reads). Runs before the flow's body; Prefect logs a hook's failure and goes on."""
    from prefect.client.orchestration import get_client

    tag = OWNER_TAG + process_tag()
    if tag not in flow_run.tags:
        with get_client(sync_client=True) as client:
            client.update_flow_run(flow_run.id, tags=[*flow_run.tags, tag])


def _start_api_serialized() -> None:
    """Without PREFECT_API_URL every command starts a temporary server on the SQLite database in
    PREFECT_HOME, and its first start migrates that database: concurrent first starts raced
    (measured: "table concurrency_limit_v2 already exists"). One at a time, under a file lock in
    PREFECT_HOME; after that each process keeps its own server for its lifetime."""
    import fcntl
    import os
    from pathlib import Path

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return
    home = Path(os.environ.get("PREFECT_HOME", str(Path.home() / ".prefect")))
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".farm-server-start.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with get_client(sync_client=True) as client:
                client.api_healthcheck()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def mark_dead_runs_crashed(res: Any) -> list[str]:
    """Flow runs still `Running` whose owning process is gone, set `Crashed`: on this host, a dead
    pid; on another, a liveness lease silent past FARM_LEASE_STALE_SECONDS (farm/leases.py), so a
    dead host's runs end Crashed on the next run anywhere."""
    from farm.leases import forget, owner_alive
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    crashed = []
    try:
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))), limit=200)
            for run in runs:
                owners = [t[len(OWNER_TAG):] for t in run.tags if t.startswith(OWNER_TAG)]
                if not owners:
                    continue
                if owners[0] == process_tag():
                    continue
                started = run.start_time or run.expected_start_time
                if gone_here(owners[0]):  # this host's process, its pid gone: at once
                    gone = True
                else:  # another host's: its liveness lease silent past the bound (a run too young to tell waits)
                    young = started is not None and (datetime.now(timezone.utc) - started).total_seconds() \
                        < res.settings.lease_stale_seconds
                    gone = not young and not owner_alive(res, owners[0])
                if gone:
                    client.set_flow_run_state(run.id, Crashed(message=f"its process ({owners[0]}) is gone"), force=True)
                    forget(res, owners[0])
                    crashed.append(str(run.id))
    except Exception as exc:  # noqa: BLE001 - hygiene must never stop a build
        log.warning("could not check for crashed flow runs: %s", exc)
    if crashed:
        log.warning("marked %d flow run(s) Crashed: their process is gone (%s)", len(crashed), ", ".join(crashed))
    return crashed

