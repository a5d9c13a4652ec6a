"""A build whose every result is already recorded: found by reading lineage, with no flow run.

`farm build` of inputs built before ran the whole build flow to find each stage cached, each gate
result and device result reusable and the card unchanged: ~2.8 s, most of it importing Prefect and
its round trips, against the 5 % of a cold build (~2.3 s) the farm aims at (issue 19). Here the same
answer comes from lineage and the store alone: each stage under `recorded_only()` (the content-keyed
cache, the stored bytes verified; where a stage would work, NotRecorded), every gate the build
would run with a result recorded for exactly that measurement (farm/gates/suite.py:recorded_result),
every enabled device with a reusable result (farm/devices/bench.py:recorded_device_results), and the
card unchanged (farm/cards/publish.py:unchanged_card). Anything missing, or a recorded gate failure
(a failing build's flow run ends Failed and reports it), and the build runs its flow as before.

The same rules decide as in the flow (the same functions), so a build answered here is the build the
flow would have reported, nothing measured, nothing new published. The CLI still puts it on record
as a flow run of `build` (farm/ops/run_record.py), so the UI lists every build."""

from __future__ import annotations

import logging
import time
from typing import Any

from farm.pipeline import Job, build_summary, run_stages
from farm.resources import Resources
from farm.stages.common import NotRecorded, recorded_only
from farm.summary import device_row, gate_row

log = logging.getLogger(__name__)


def recorded_build(res: Resources, job: Job, run_gates: bool = True,
                   run_bench: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """(the build's summary, its progress events) when every result is recorded; None otherwise
    (and why, in the log)."""
    try:
        return _recorded(res, job, run_gates, run_bench)
    except NotRecorded as exc:
        log.info("the build has work to do (%s): running its flow", exc)
        return None


def _recorded(res: Resources, job: Job, run_gates: bool, run_bench: bool):
    events: list[dict[str, Any]] = []
    with recorded_only():
        done = run_stages(res, job, progress=lambda _line: None)
    events += [{"kind": "stage", "name": s.name, "status": s.status, "seconds": s.seconds} for s in done.values()]
    summary = build_summary(job, done)
    sha = summary["artifact"]["sha256"]
    if run_gates:
        results = recorded_gates(res, sha, job)
        summary["gates"] = [gate_row(r) for r in results]
        summary["rechecks"] = []
        events += [{"kind": "gate", "name": r["gate"] + ("" if (r.get("cpu") or {}).get("how", "native") == "native"
                                                         else f" [{r['cpu']['label']}]"),
                    "status": r["status"], "detail": "recorded earlier"} for r in results]
    if run_bench:
        from farm.devices import load_registry
        from farm.devices.bench import recorded_device_results
        from farm.summary import device_event

        records = []
        from farm.devices.classes import benchmarked_here

        for device in benchmarked_here(res, load_registry()):
            got = recorded_device_results(res, sha, device)
            if got is None:
                raise NotRecorded(f"no reusable result on {device.id}")
            records += got
            events += [device_event(device.id, r) for r in got]
        summary["devices"] = [device_row(r) for r in records]
    if run_gates:
        from farm.cards.publish import unchanged_card

        card = unchanged_card(res, job.config.name, job.config.card.model_dump(mode="json"))
        if card is None:
            raise NotRecorded("the card would change")
        summary["card"] = {"published": True, "unchanged": True, "model_id": card["model_id"],
                           "card_sha256": card["card_sha256"], "files": [], "uris": card["uris"]}
        events.append({"kind": "card", "name": card["model_id"], "status": "unchanged",
                       "detail": card["card_sha256"][:12]})
    summary["recorded"] = True  # nothing ran: `farm build --json` says so
    return summary, events


def recorded_gates(res: Resources, sha: str, job: Job) -> list[dict[str, Any]]:
    """The result recorded for each gate the build's suite would run, as the suite would reuse it."""
    from farm_common.gates import select
    from farm.gates.suite import SuiteContext, recorded_result, too_large_for
    from farm_common.wire import FAILING

    ctx = SuiteContext.open(res, sha, job.config.gates)
    try:
        out = []
        chosen = select(None, ctx.config.skip, ctx.config.enables)
        # This host's class first, then the per-class gates on every other enabled class, as the suite.
        # (an emulated class the file is too large for is not gated by a build: nothing to find there)
        runs = [(spec, None) for spec in chosen] + [
            (spec, where.device.id) for where in ctx.classes.presented[1:] if too_large_for(ctx, where) is None
            for spec in chosen if spec.per_class]
        for spec, device in runs:
            t0 = time.monotonic()
            applies, found = recorded_result(ctx, spec, device)
            on = f" on {device}" if device else ""
            if not applies:
                continue
            if found is None:
                raise NotRecorded(f"gate {spec.name}{on} has no result for these bytes and settings")
            if found["status"] in FAILING:
                raise NotRecorded(f"gate {spec.name}{on} failed: the flow reports it and ends Failed")
            log.debug("gate %s%s: recorded result %s (%.3f s)", spec.name, on, found.get("id"), time.monotonic() - t0)
            out.append(found)
        return out
    finally:
        ctx.close()
