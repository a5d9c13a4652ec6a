"""Devices every bundle is benchmarked on: the registry (infra/devices.yaml, registry.py), the
runners that reach them (runners/, one module per kind), the parsers that turn what LiteRT-LM
printed into a record (parse.py), and the benchmark of one bundle on one device, recorded
(bench.py); this package's face.

Only a record with ok=True (failure_class None) counts as a measurement that verifies a device."""

from farm.devices.parse import FAILURE_CLASSES, classify, parse_android_benchmark, parse_cli_benchmark
from farm.devices.protocol import BenchProtocol
from farm.devices.registry import Device, DeviceRegistry, load_registry, local_device

__all__ = [
    "FAILURE_CLASSES", "BenchProtocol", "Device", "DeviceRegistry", "classify", "load_registry",
    "local_device", "parse_android_benchmark", "parse_cli_benchmark",
]
