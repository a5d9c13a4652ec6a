"""Benchmark one bundle on one registered device, every accelerator the device has, one at a time,
and record each run (a failure too, with its class). Only a recorded run with real figures makes a
device "verified" for a file."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

from farm.devices import Device, device_result_values, run_benchmark
from farm.lineage.queries import artifact_brief, largest_peak_mb
from farm.lineage.record import record_device_result
from farm.resources import Resources

# One run at a time per device inside this process (a phone or a Pi measures badly while busy).
# Across hosts, the per-device work queue's concurrency limit does the same (infra/prefect.yaml).
_DEVICE_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock(device_id: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _DEVICE_LOCKS.setdefault(device_id, threading.Lock())


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
    res: Resources, sha: str, device: Device, flow_run_id: str | None = None
) -> list[dict[str, Any]]:
    with res.db.session() as s:
        context = (artifact_brief(s, sha)["details"].get("metadata") or {}).get("cache_length")
    protocol = device.protocol.fit_context(context) if context else device.protocol
    need, basis = estimated_need_mb(res, sha)
    out = []
    with _lock(device.id):
        bundle = res.store.open_verified_path(sha)
        for accelerator in device.accelerators:
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
                rec = run_benchmark(device, bundle, sha, accelerator, protocol=protocol,
                                    toolchain_python=res.toolchain.python)
                values = device_result_values(rec)
                peak = values.get("peak_mem_mb")
                if peak and device.ram_mb:
                    values["env"] = {**values["env"], "peak_vs_ram": round(peak / device.ram_mb, 4)}
            with res.db.session() as s:
                rid = record_device_result(s, **values, flow_run_id=flow_run_id)
            out.append({"id": rid, **values})
    return out
