"""Runners: how the farm reaches a device (see base.py for the interface)."""

from __future__ import annotations

import os

from farm.devices.registry import Device
from farm.devices.runners.adb import AdbRunner
from farm.devices.runners.base import DeviceError, Runner, RunOutput
from farm.devices.runners.local import LocalRunner
from farm.devices.runners.ssh import SshRunner

__all__ = ["AdbRunner", "DeviceError", "LocalRunner", "Runner", "RunOutput", "SshRunner", "get_runner"]


def get_runner(device: Device, *, toolchain_python: str | os.PathLike | None = None) -> Runner:
    """The runner for a registry device. `toolchain_python` locates the local `litert-lm` CLI
    (default: the farm's toolchain env, honouring FARM_TOOLCHAIN_PYTHON)."""
    kind = device.runner.kind
    if kind == "local":
        return LocalRunner(device, toolchain_python)
    if kind == "ssh":
        return SshRunner(device)
    if kind == "adb":
        return AdbRunner(device)
    raise ValueError(f"unknown runner kind {kind!r}")
