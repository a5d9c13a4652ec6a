"""Devices every bundle is benchmarked on: the registry (infra/devices.yaml), the runners that reach
them (local, ssh, adb) and the parsers that turn what LiteRT-LM printed into a record.

    reg = load_registry()                         # BadInput (one line) on a bad file
    for device, accelerator in reg.targets():     # enabled devices x their accelerators
        rec = run_benchmark(device, bundle_path, sha256, accelerator)
        # rec["ok"] is True only for a real measurement with tokens/s > 0 and no failure_class

Only a record with ok=True (failure_class None) counts as a measurement that verifies a device.
"""

from __future__ import annotations

import os
from typing import Any

from farm.devices.parse import FAILURE_CLASSES, classify, parse_android_benchmark, parse_cli_benchmark
from farm.devices.registry import BenchProtocol, Device, Registry, load_registry, local_device
from farm.devices.runners import DeviceError, Runner, RunOutput, get_runner

__all__ = [
    "FAILURE_CLASSES", "BenchProtocol", "Device", "DeviceError", "Registry", "RunOutput", "Runner",
    "classify", "get_runner", "load_registry", "local_device", "parse_android_benchmark",
    "parse_cli_benchmark", "run_benchmark",
]


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
