import time

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from farm_common.gates import GATES
from farm.gates.suite import SuiteContext, run_gate
from flows.tasks.common import begin, progress


@task(name="gate", cache_policy=NO_CACHE, task_run_name="{gate_name} {ctx.bundle_sha:.12} {device}")
def gate_task(ctx: SuiteContext, gate_name: str, reuse: bool = False, recheck_id: int | None = None,
              device: str | None = None):
    """One gate on one bundle, on one CPU class (a class device's id; None: this host's); returns
    the recorded result (None when the gate does not apply). The suite's context is passed quoted
    (prefect.utilities.annotations.quote): it holds the resources and is not a parameter to introspect."""
    from farm.ops.console import emit

    label = gate_name if recheck_id is None else f"{gate_name} {ctx.bundle_sha[:8]}"
    if device is not None:
        label += f" [{ctx.target(device).view.label}]"
    begin("gate", label)
    t0 = time.monotonic()
    r = run_gate(ctx, GATES.get(gate_name), progress(), flow_run_id=flow_run.id, recheck_id=recheck_id, reuse=reuse,
                 device=device)
    if r is not None:
        emit("gate", label, r["status"], time.monotonic() - t0, "recorded earlier" if r.get("reused") else "")
    return r
