"""Gate flows: the suite on one bundle, and the sibling re-check a failure triggers.

`gate_suite` resolves the bundle's context once, runs each gate as its own task (visible one by one
in the Prefect UI) and records every result. A suite with a failing gate ends its flow run `Failed`
after recording everything (so a rebuild started from the UI does not show green); its summary is the
failed state's data.

When a gate fails, `recheck_siblings` links the failure to every sibling — the files made the same
way, following the failure's cause (farm/lineage/queries/gates.py:recheck_basis: the recipe, or the export
configuration) — and starts one `recheck-sibling` flow run per sibling, concurrently, each holding a
slot of the Prefect global concurrency limit `farm-recheck` (settings.recheck_concurrency on first
use). A sibling re-runs every gate of the failed gate's kind that its own config does not skip; one that cannot be gated gets a
`could_not_run` result with the reason. The seeds' "when one file is found defective, the other
files made with the same recipe are re-checked", made automatic and on record."""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from typing import Any

from prefect import flow, get_run_logger
from prefect.concurrency.asyncio import concurrency
from prefect.runtime import flow_run
from prefect.states import Failed
from prefect.utilities.annotations import quote

from farm.ops.console import emit
from farm.devices import load_registry
from farm.devices.classes import class_targets
from farm.gates.config import GateConfig
from farm.errors import FarmError
from farm_common.gates import GATES, for_sibling, of_kind, select
from farm.gates.suite import (FAILING, SuiteContext, failure_line, record_could_not_run, record_skipped,
                              too_large_for)
from farm.leftovers import sweep_farm
from farm.lineage.queries.gates import gate_result, recheck_basis
from farm.lineage.record import record_recheck, record_recheck_runs
from farm.resources import get_resources
from flows.tasks.common import device_slot, ensure_concurrency_limit
from flows.tasks.gates import gate_task

RECHECK_LIMIT = "farm-recheck"


@flow(name="gate-suite")
def gate_suite(
    sha256: str,
    gates: list[str] | None = None,
    config: GateConfig | None = None,
    recheck_failures: bool = True,
    reuse: bool = False,
    runtime: str | None = None,
    devices: list[str] | None = None,
):
    """The gates on one bundle: every gate on this host's CPU class, then the gates whose answers
    depend on the runtime's kernels (`per_class`) on every other enabled class — or only on the
    class devices named in `devices` (this host's gates run when its device is named)."""
    res = get_resources(runtime)
    sweep_farm(res)
    ctx = SuiteContext.open(res, sha256, config)
    try:
        chosen = select(gates, ctx.config.skip, ctx.config.enables)
        if devices:
            ctx.use_classes(class_targets(res, devices=devices))
        results = []
        if not devices or ctx.classes.host.device.id in devices:
            results = [r for spec in chosen if (r := gate_task(quote(ctx), spec.name, reuse)) is not None]
        # Then every other CPU class a user runs (farm/devices/classes.py): the gates whose answers
        # depend on the runtime's kernels, each result naming its class. A class this host leaves out
        # (optional, not presentable here) is said, never silently dropped.
        for device, why in ctx.classes.left_out if any(s.per_class for s in chosen) else ():
            emit("gate", f"[{device.id}]", "skipped", None, f"left out on this host: {why}"[:110])
        for where in ctx.classes.presented[1:]:
            # An emulated class past its size limit is on record as not measured (named devices always run).
            if not devices and (why := too_large_for(ctx, where)) is not None:
                results += [record_skipped(ctx, spec, where, why, flow_run.id) for spec in chosen if spec.per_class]
                emit("gate", f"[{where.view.label}]", "skipped", None, why.split(": ", 1)[1][:90])
                continue
            # One suite at a time per class device (its Prefect global concurrency slot `device-<id>`,
            # which its benchmark holds too): an emulated class takes the cores it runs on.
            with device_slot(where.device):
                results += [r for spec in chosen if spec.per_class
                            and (r := gate_task(quote(ctx), spec.name, reuse, device=where.device.id)) is not None]
    finally:
        ctx.close()
    # A failure already re-checked (a reused result) does not trigger another re-check, nor does one
    # the family declares a known failure of the installed tool (a runtime defect, not the recipe's:
    # the image bundles' zero-embedded stop token would otherwise re-gate every file of the recipe).
    fresh = [r for r in results if r["status"] in FAILING and not r.get("reused")
             and ctx.known_failure(r["gate"]) is None]
    rechecks = []
    if recheck_failures:
        # One re-check per kind and CPU class: a failure on the AVX2 class re-checks the siblings there.
        for kind, device in sorted({(r["kind"], r["device"]) for r in fresh}):
            trigger = next(r for r in fresh if r["kind"] == kind and r["device"] == device)
            rechecks.append(recheck_siblings(trigger["id"], runtime))
    summary = {"sha256": sha256, "results": results, "rechecks": rechecks}
    failed = [r for r in results if r["status"] in FAILING]
    if failed:
        return Failed(message="; ".join(failure_line(r) for r in failed)[:2000], data=summary)
    return summary


@flow(name="recheck-siblings")
def recheck_siblings(trigger_result_id: int, runtime: str | None = None) -> dict[str, Any]:
    res = get_resources(runtime)
    log = get_run_logger()
    with res.db.session() as s:
        trigger = gate_result(s, trigger_result_id)
        basis = recheck_basis(s, trigger)
        recheck_id = record_recheck(
            s, trigger_result_id=trigger_result_id, recipe_digest=basis["recipe_digest"], basis=basis["basis"],
            basis_key=basis["key"], kind=trigger["kind"], siblings=basis["siblings"], flow_run_id=flow_run.id,
        )
    # The siblings are re-checked on the class the failure was measured on (this host's: None).
    device = trigger["device"] if (trigger.get("cpu") or {}).get("how", "native") != "native" else None
    gates = [g.name for g in of_kind(trigger["kind"]) if device is None or g.per_class]
    sibs = basis["siblings"]
    log.info("gate %s failed on %s%s: re-checking %d sibling(s) by %s (%s), gates %s", trigger["gate"],
             trigger["artifact_sha256"][:12], f" [{trigger['cpu']['label']}]" if device else "", len(sibs),
             basis["basis"], (basis["key"] or "-")[:12], gates)
    states = []
    if sibs:
        ensure_concurrency_limit(RECHECK_LIMIT, res.settings.recheck_concurrency)

        async def all_siblings():
            # Each sibling is its own flow run (a child of this one in the UI), started together;
            # the concurrency limit decides how many measure at once. (Sync subflows started from
            # threads race for the same run: Prefect derives a subflow run's key from a per-parent
            # counter, and two threads read it at once — measured: two siblings, one flow run.)
            return await asyncio.gather(*(recheck_sibling(sib, gates, recheck_id, runtime, device,
                                                          return_state=True) for sib in sibs))

        states = asyncio.run(all_siblings())
    run_ids = [str(st.state_details.flow_run_id) for st in states]
    with res.db.session() as s:
        record_recheck_runs(s, recheck_id, run_ids)
    results = [r for st in states for r in (st.result(raise_on_failure=False) or [])]
    return {"recheck_id": recheck_id, "trigger_result_id": trigger_result_id, "basis": basis["basis"],
            "siblings": sibs, "flow_run_ids": run_ids, "results": results}


@flow(name="recheck-sibling", flow_run_name="recheck {sha256:.12}")
async def recheck_sibling(sha256: str, gates: list[str], recheck_id: int, runtime: str | None = None,
                          device: str | None = None) -> list[dict[str, Any]]:
    """Every named gate on one sibling, on the CPU class of the failure (a class device's id; None:
    this host's), each result (could_not_run included) tied to the re-check."""
    async with concurrency(RECHECK_LIMIT, occupy=1, strict=False):
        res = get_resources(runtime).with_own_toolchain()  # concurrent siblings: a toolchain process each
        try:
            return await asyncio.to_thread(_recheck_one, res, sha256, gates, recheck_id, device)
        finally:
            res.toolchain.close()


def _recheck_one(res, sha256: str, gates: list[str], recheck_id: int, device: str | None = None) -> list[dict[str, Any]]:
    def brief(r: dict[str, Any]) -> dict[str, Any]:
        return {"artifact_sha256": r["artifact_sha256"], "gate": r["gate"], "status": r["status"], "result_id": r["id"]}

    try:
        ctx = SuiteContext.open(res, sha256)
    except FarmError as exc:
        return [brief(record_could_not_run(res, sha256, GATES.get(g), str(exc), flow_run.id, recheck_id)) for g in gates]
    out = []
    try:
        # On a class device, its slot as in the suite (one class run at a time per device).
        with device_slot(load_registry().get(device)) if device is not None else nullcontext():
            for name in for_sibling(gates, ctx.config.skip):
                spec = GATES.get(name)
                if spec.optional and not ctx.config.enables(name):
                    r = record_could_not_run(res, sha256, spec, f"its build config has no {name} section (the inputs "
                                             "this gate needs for this model)", flow_run.id, recheck_id)
                else:
                    try:
                        r = gate_task(quote(ctx), name, False, recheck_id, device=device)
                    except FarmError as exc:
                        r = record_could_not_run(res, sha256, spec, str(exc), flow_run.id, recheck_id)
                    if r is None:
                        r = record_could_not_run(res, sha256, spec, f"{name} does not apply to this file (no "
                                                 f"{'float export' if spec.target == 'float' else 'input'} recorded)",
                                                 flow_run.id, recheck_id)
                out.append(brief(r))
    finally:
        ctx.close()
    return out


__all__ = ["gate_suite", "recheck_siblings", "recheck_sibling"]
