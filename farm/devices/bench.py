"""Benchmark one bundle on one registered device, every accelerator the device has, one at a time,
and record each run (a failure too, with its class). Only a recorded run with real figures makes a
device "verified" for a file.

    rec = run_benchmark(device, bundle_path, sha256, accelerator)
    # rec["ok"] is True only for a real measurement with tokens/s > 0 and no failure_class
"""

from __future__ import annotations

import datetime as _dt
import os
from datetime import datetime, timezone
from typing import Any

from farm.devices.protocol import BenchProtocol
from farm.devices.registry import Device
from farm.devices.runners import RUNNERS, get_runner
from farm.leases import lease
from farm.lineage.queries.artifacts import artifact_brief
from farm.lineage.queries.devices import largest_peak_mb, reusable_device_result
from farm.lineage.record import record_device_result
from farm.results import DeviceRecord, RanOn
from farm.resources import Resources

def run_benchmark(
    device: Device,
    bundle_path: str | os.PathLike,
    sha256: str,
    accelerator: str,
    *,
    protocol: BenchProtocol | None = None,
    toolchain_python: str | os.PathLike | None = None,
    env: dict[str, Any] | None = None,
    keep: bool = False,
) -> dict[str, Any]:
    """push -> run -> parse/classify -> cleanup on one device and accelerator; returns the record
    (device, accelerator, runs, prefill/decode token counts and tokens/s, ttft_ms, init_ms,
    peak_mem_mb, delegated_ops, total_ops, full_delegation, failure_class, error, ok, evidence, env,
    command, protocol, seconds, measured_at). Unreachable devices give failure_class device_error."""
    runner = get_runner(device, toolchain_python=toolchain_python)
    try:
        return runner.benchmark(bundle_path, sha256, accelerator, protocol, env=env, keep=keep)
    finally:
        if not keep and RUNNERS.get(device.runner.kind).this_host:  # its scratch folder on this host
            runner.cleanup()


def device_result_values(rec: dict[str, Any]) -> dict[str, Any]:
    """A run_benchmark record as keyword values for farm.lineage.record.record_device_result (the
    error text, command, exit code and seconds go into env so nothing measured is dropped)."""
    # Where it ran (host, class) is the caller's to add, and the row id and flow run lineage's.
    theirs = {"id", "flow_run_id", *RanOn.model_fields}
    values = {k: rec[k] for k in DeviceRecord.model_fields if k in rec and k not in theirs}
    values["env"] = {**(rec.get("env") or {}), "run": {k: rec.get(k) for k in (
        "error", "command", "exit_code", "timed_out", "seconds", "delegate", "peak_mem_source", "runner", "remote_path")}}
    values["evidence"] = list(rec.get("evidence") or [])
    values["started_at"] = _dt.datetime.fromisoformat(rec["started_at"])
    values["finished_at"] = _dt.datetime.fromisoformat(rec["finished_at"])
    return values


# One run at a time per device, across the whole farm (a phone or a Pi measures badly while busy):
# the Prefect global concurrency limit `device-<id>` around every call of bench_device
# (flows/tasks/bench.py, flows/fanout.py:bench_one), so two builds, or a build and a re-validation, on any
# hosts, never benchmark one device at once.


def estimated_need_mb(res: Resources, sha: str) -> tuple[float, str]:
    """What running the file will take: the largest peak measured for this file on any device, or
    else its size plus a third (weights are mapped; activations, KV cache and runtime come on top)."""
    with res.db.session() as s:
        peak = largest_peak_mb(s, sha)
        size = artifact_brief(s, sha)["size"]
    if peak:
        return float(peak), "the largest peak measured for this file on another device"
    return size / 2**20 * 4 / 3, "the file size plus a third (no measured peak yet)"


def bench_device(
    res: Resources, sha: str, device: Device, flow_run_id: str | None = None, reuse: bool = False
) -> list[dict[str, Any]]:
    """Every accelerator of the device, each run recorded. With `reuse` (a build's fan-out), an
    accelerator that already has a result of these bytes under this protocol (and, on this host,
    this runtime release) is not measured again: the record is returned with `reused`, and
    concurrent identical builds measure once, under a lineage lease (`farm bench` measures afresh)."""
    protocol = _protocol(res, sha, device)
    need, basis = estimated_need_mb(res, sha)
    out = []
    bundle = res.store.open_verified_path(sha)
    # The runtime release matters only when reusing (asking the toolchain costs a process round trip).
    runtime = _runtime(res, device) if reuse else None
    where = _where(res, device)
    cpu_class = where["cpu_class"] if where else None
    for accelerator in device.accelerators:
        if not reuse:
            out.append(_run_and_record(res, sha, device, accelerator, protocol, bundle, need, basis, flow_run_id, where))
            continue
        # Concurrent identical builds: the first measures, the others wait on its lease (the
        # lineage DB's, so it holds whatever Prefect server each build talks to) and reuse it.
        what = {"device_run": sha, "device": device.id, "accelerator": accelerator,
                "protocol": protocol.model_dump(mode="json"), "runtime": runtime, "cpu_class": cpu_class,
                "host": where["host"] if where else None}
        with lease(res, what, f"bench {device.id} {accelerator} {sha[:12]}"):
            with res.db.session() as s:
                kept = reusable_device_result(s, sha, device.id, accelerator, what["protocol"], runtime, cpu_class,
                                              what["host"])
            out.append({**kept, "reused": True} if kept is not None else
                       _run_and_record(res, sha, device, accelerator, protocol, bundle, need, basis, flow_run_id,
                                       where))
    return out


def _where(res: Resources, device: Device) -> dict[str, Any] | None:
    """Where a CPU-class device's benchmark runs: host, class key and view (None for a board or a
    phone: its runner's env facts say what it is). A result is reused only on the same class."""
    from farm.devices.classes import is_class_device, target_for

    if not is_class_device(device) or device.elsewhere():  # another host's: its own results, its own class
        return None
    rec = target_for(res, device).record()
    rec.pop("device")
    return rec


def recorded_device_results(res: Resources, sha: str, device: Device) -> list[dict[str, Any]] | None:
    """What a build's fan-out would reuse for this device, every accelerator, measuring nothing; None
    when one has no reusable result (farm/recorded.py: then the build runs its flow)."""
    protocol, runtime = _protocol(res, sha, device).model_dump(mode="json"), _runtime(res, device)
    where = _where(res, device)
    out = []
    with res.db.session() as s:
        for accelerator in device.accelerators:
            kept = reusable_device_result(s, sha, device.id, accelerator, protocol, runtime,
                                          where["cpu_class"] if where else None, where["host"] if where else None)
            if kept is None:
                return None
            out.append({**kept, "reused": True})
    return out


def _protocol(res: Resources, sha: str, device: Device) -> Any:
    """The device's protocol for this file: its context fitted to the bundle's cache length."""
    with res.db.session() as s:
        context = (artifact_brief(s, sha)["details"].get("metadata") or {}).get("cache_length")
    return device.protocol.fit_context(context) if context else device.protocol


def _runtime(res: Resources, device: Device) -> str | None:
    """The litert-lm release a result on this host must have been measured with (None elsewhere)."""
    return res.toolchain.versions["packages"].get("litert-lm") if RUNNERS.get(device.runner.kind).this_host else None


def _run_and_record(res: Resources, sha: str, device: Device, accelerator: str, protocol: Any, bundle: Any,
                    need: float, basis: str, flow_run_id: str | None,
                    where: dict[str, Any] | None = None) -> dict[str, Any]:
    """One accelerator: a run (or the recorded decision that the file does not fit), recorded."""
    now = datetime.now(timezone.utc)
    if device.ram_mb is not None and need > device.ram_mb:
        # Do not drain a device with a run that cannot fit: record why, measured or estimated.
        values = dict(
            artifact_sha256=sha, device_id=device.id, accelerator=accelerator, status="does_not_fit",
            failure_class="does_not_fit", prefill_tokens=protocol.prefill_tokens,
            decode_tokens=protocol.decode_tokens, runs=0, cache_mode=protocol.cache_mode,
            env={"ram_mb": device.ram_mb, "estimated_need_mb": round(need, 1), "basis": basis},
            evidence=[f"estimated {need:.0f} MB ({basis}) > device RAM {device.ram_mb} MB"],
            protocol=protocol.model_dump(mode="json"), started_at=now, finished_at=now,
        )
    else:
        rec = run_benchmark(device, bundle, sha, accelerator, protocol=protocol, toolchain_python=res.toolchain.python)
        values = device_result_values(rec)
        peak = values.get("peak_mem_mb")
        if peak and device.ram_mb:
            values["env"] = {**values["env"], "peak_vs_ram": round(peak / device.ram_mb, 4)}
    return _record(res, DeviceRecord(**{**values, **(where or {})}, flow_run_id=flow_run_id))


def _record(res: Resources, record: DeviceRecord) -> dict[str, Any]:
    with res.db.session() as s:
        rid = record_device_result(s, record)
    return record.recorded(rid).view()


def record_device_failure(res: Resources, sha: str, device: Device, failure_class: str, evidence: list[str],
                          started: datetime, flow_run_id: str | None = None,
                          env: dict[str, Any] | None = None) -> dict[str, Any]:
    """A device run that produced no result (the runner raised, the worker's run crashed or never
    ran) is that device's own failed cell, recorded like any run: no device goes missing."""
    return _record(res, DeviceRecord(
        artifact_sha256=sha, device_id=device.id, accelerator=device.accelerators[0], status="failed",
        failure_class=failure_class, prefill_tokens=device.protocol.prefill_tokens,
        decode_tokens=device.protocol.decode_tokens, runs=0, cache_mode=device.protocol.cache_mode,
        env=env or {}, evidence=[e[:2000] for e in evidence], protocol=device.protocol.model_dump(mode="json"),
        flow_run_id=flow_run_id, started_at=started, finished_at=datetime.now(timezone.utc),
    ))
