"""Runners: how the farm reaches a device, one module per kind (see registry.py; base.py for the
interface); this package's face."""

from farm.devices.runners.base import DeviceError, Runner, RunOutput
from farm.devices.runners.registry import RUNNERS, get_runner

__all__ = ["RUNNERS", "DeviceError", "RunOutput", "Runner", "get_runner"]
