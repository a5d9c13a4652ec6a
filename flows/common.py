"""What the flows share: running a flow from the CLI (its data, failed or not), and crash hygiene."""

from __future__ import annotations

import logging
from typing import Any

from farm.leftovers import owner_tag, pid_alive

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

    owned = flow.with_options(on_running=[*flow.on_running_hooks, _tag_owner])
    if FlowRunContext.get() is None:
        _start_api_serialized()
        mark_dead_runs_crashed()
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            state = owned(*args, return_state=True, **kwargs)
    else:
        state = owned(*args, return_state=True, **kwargs)
    data = state.result(raise_on_failure=False)
    if isinstance(data, BaseException):
        raise data
    return data


def _tag_owner(flow: Any, flow_run: Any, state: Any) -> None:
    """on_running hook: add this process's owner tag to the flow run (what `mark_dead_runs_crashed`
    reads). Runs before the flow's body; Prefect logs a hook's failure and goes on."""
    from prefect.client.orchestration import get_client

    tag = OWNER_TAG + owner_tag()
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


def mark_dead_runs_crashed() -> list[str]:
    """Flow runs still `Running` whose owning process, on this host, is gone: set `Crashed`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    host = owner_tag().rsplit(".", 1)[0]
    crashed = []
    try:
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))), limit=200)
            for run in runs:
                owners = [t[len(OWNER_TAG):] for t in run.tags if t.startswith(OWNER_TAG)]
                if not owners:
                    continue
                run_host, _, pid = owners[0].rpartition(".")
                if run_host == host and pid.isdigit() and not pid_alive(int(pid)):
                    client.set_flow_run_state(run.id, Crashed(message=f"its process ({owners[0]}) is gone"), force=True)
                    crashed.append(str(run.id))
    except Exception as exc:  # noqa: BLE001 - hygiene must never stop a build
        log.warning("could not check for crashed flow runs: %s", exc)
    if crashed:
        log.warning("marked %d flow run(s) Crashed: their process is gone (%s)", len(crashed), ", ".join(crashed))
    return crashed

