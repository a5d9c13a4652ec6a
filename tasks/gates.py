from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from farm.config import GateConfig
from farm.gates import BY_NAME
from farm.stages.gates import gate_context, run_gate
from tasks.common import progress, resources


@task(name="gate", cache_policy=NO_CACHE, task_run_name="{gate_name} {sha256:.12}")
def gate_task(sha256: str, gate_name: str, config: GateConfig | None = None, recheck_id: int | None = None,
              reuse: bool = False):
    """One gate on one bundle; returns the recorded result (None when the gate does not apply)."""
    res = resources()
    ctx = gate_context(res, sha256, config)
    return run_gate(res, ctx, BY_NAME[gate_name], progress(), flow_run_id=flow_run.id, recheck_id=recheck_id,
                    reuse=reuse)
