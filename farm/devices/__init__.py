"""Devices every bundle is benchmarked on: the registry (infra/devices.yaml), the runners that reach
them (local, ssh, adb) and the parsers that turn what LiteRT-LM printed into a record.

    reg = load_registry()                         # BadInput (one line) on a bad file
    for device, accelerator in reg.targets():     # enabled devices x their accelerators
        rec = run_benchmark(device, bundle_path, sha256, accelerator)
        # rec["ok"] is True only for a real measurement with tokens/s > 0 and no failure_class

Only a record with ok=True (failure_class None) counts as a measurement that verifies a device.
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import Any

from farm.devices.parse import FAILURE_CLASSES, classify, parse_android_benchmark, parse_cli_benchmark
from farm.devices.registry import BenchProtocol, Device, Registry, load_registry, local_device
from farm.devices.runners import DeviceError, Runner, RunOutput, get_runner

__all__ = [
    "FAILURE_CLASSES", "BenchProtocol", "Device", "DeviceError", "Registry", "RunOutput", "Runner",
    "classify", "get_runner", "load_registry", "local_device", "parse_android_benchmark",
    "parse_cli_benchmark", "run_benchmark", "device_result_values",
]

# The columns of lineage's device_results rows a record fills (flow_run_id is the caller's).
RESULT_COLUMNS = (
    "artifact_sha256", "device_id", "accelerator", "status", "failure_class", "prefill_tokens", "decode_tokens",
    "runs", "cache_mode", "prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms", "init_ms", "peak_mem_mb",
    "delegated_ops", "total_ops", "full_delegation", "context_length", "runtime", "runtime_version", "env",
    "evidence", "protocol",
)


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
        if not keep and device.runner.kind == "local":
            runner.cleanup()


def device_result_values(rec: dict[str, Any]) -> dict[str, Any]:
    """A run_benchmark record as keyword values for farm.lineage.record.record_device_result (the
    error text, command, exit code and seconds go into env so nothing measured is dropped)."""
    values = {k: rec.get(k) for k in RESULT_COLUMNS}
    values["env"] = {**(rec.get("env") or {}), "run": {k: rec.get(k) for k in (
        "error", "command", "exit_code", "timed_out", "seconds", "delegate", "peak_mem_source", "runner", "remote_path")}}
    values["evidence"] = list(rec.get("evidence") or [])
    values["started_at"] = _dt.datetime.fromisoformat(rec["started_at"])
    values["finished_at"] = _dt.datetime.fromisoformat(rec["finished_at"])
    return values
