"""The CPU classes a file is verified on: every enabled device whose runner runs the toolchain's
gates under a class — this host's own (`local`), a lower x86 class by CPUID masking
(`cpuid_mask`), an arm64 class under qemu (`qemu_arm64`) — each with the class its runtime process
reported (farm_common/cpu_classes.py).

    targets = class_targets(res)        # the host first; duplicates of a class dropped
    targets.presented, targets.left_out  # [ClassTarget], [(device, why)]

A target's `view` is what a runtime process saw under the presentation (the toolchain's `cpu_view`
command, asked once per presentation and process), never what the registry promised: the reuse key
of every result is that view's class key. A class this host cannot present is refused in one line
(BadInput) when its device is enabled, or left out with the reason when the device says `optional`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from farm.devices.registry import Device, DeviceRegistry, load_registry
from farm.devices.runners import RUNNERS, get_runner
from farm.errors import BadInput
from farm.resources import Resources
from farm_common import cpu_classes
from farm_common.cpu_classes import CpuView, NotPresentable


@dataclass(frozen=True)
class ClassTarget:
    device: Device
    presentation: dict[str, Any] | None  # the gate request's `cpu` field; None: the toolchain process itself
    view: CpuView

    def record(self) -> dict[str, Any]:
        """What a result records of where it ran: device, host, class key and the whole view."""
        return {"device": self.device.id, "host": self.view.host, "cpu_class": self.view.key,
                "cpu": self.view.to_dict()}


@dataclass
class ClassTargets:
    presented: list[ClassTarget] = field(default_factory=list)
    left_out: list[tuple[Device, str]] = field(default_factory=list)

    @property
    def host(self) -> ClassTarget:
        return self.presented[0]

    def by_device(self, device_id: str) -> ClassTarget:
        for t in self.presented:
            if t.device.id == device_id:
                return t
        raise BadInput(f"device {device_id!r} is not a CPU class this host presents "
                       f"(classes: {', '.join(t.device.id for t in self.presented)})")


def is_class_device(device: Device) -> bool:
    """A device whose runner runs the toolchain's gates under a CPU class (local, cpuid_mask, qemu_arm64)."""
    return RUNNERS.get(device.runner.kind).runner.runs_gates


_VIEWS: dict[str, CpuView] = {}


def view_of(res: Resources, presentation: dict[str, Any] | None) -> CpuView:
    """The class a runtime process of this toolchain sees under `presentation`: asked once per host,
    CPU, toolchain and presentation, and kept under FARM_CACHE/cpu-views (a no-op build presents
    nothing: starting an arm64 Python under qemu to ask takes seconds)."""
    import hashlib
    import json
    import socket

    key = hashlib.sha256(json.dumps([socket.gethostname(), sorted(cpu_classes.host_flags()), str(res.toolchain.python),
                                     presentation], sort_keys=True).encode()).hexdigest()[:24]
    if key in _VIEWS:
        return _VIEWS[key]
    kept = res.settings.cache / "cpu-views" / f"{key}.json"
    try:
        view = CpuView.from_dict(json.loads(kept.read_text()))
    except (OSError, ValueError, KeyError):
        out = res.toolchain.call("cpu_view", {"cpu": presentation} if presentation else {},
                                 progress=lambda _l: None)
        view = CpuView.from_dict(out["cpu"])
        kept.parent.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_suffix(f".{os.getpid()}.part")
        tmp.write_text(json.dumps(view.to_dict()))
        tmp.replace(kept)
    _VIEWS[key] = view
    return view


def presentation_of(res: Resources, device: Device, host: CpuView) -> dict[str, Any] | None:
    """The `cpu` field a gate request carries to run under this device's class (None: the host's):
    each runner kind presents its own (farm/devices/runners/)."""
    if not is_class_device(device):
        raise BadInput(f"device {device.id} ({device.runner.kind}) does not run gates under a CPU class")
    return get_runner(device, toolchain_python=res.toolchain.python).presentation(res, host)


def host_target(res: Resources, registry: DeviceRegistry | None = None) -> ClassTarget:
    """This host's own class, on its local device (no presentation)."""
    reg = registry or load_registry()
    device = reg.devices.get("local-cpu") or next((d for d in reg.devices.values() if d.runner.kind == "local"), None)
    if device is None:
        raise BadInput("the device registry has no local device: this host's own class is where gates run")
    return ClassTarget(device, None, view_of(res, None))


def class_targets(res: Resources, registry: DeviceRegistry | None = None,
                  devices: list[str] | None = None) -> ClassTargets:
    """The classes a suite gates on: this host's first, then every enabled class device (or the
    named `devices`). A class that comes up as one already listed (AVX2 masked on an AVX2 host) is
    left out as the same class."""
    reg = registry or load_registry()
    chosen = [reg.get(d) for d in devices] if devices else [d for d in reg.enabled() if is_class_device(d)]
    host = host_target(res, reg)
    out = ClassTargets(presented=[host])
    seen = {host.view.key: host.device.id}
    for device in chosen:
        if device.runner.kind == "local":
            continue
        if not is_class_device(device):
            continue
        try:
            presentation = presentation_of(res, device, cpu_classes.read_view())
            view = view_of(res, presentation)
        except (NotPresentable, BadInput) as exc:
            why = str(exc)
            if getattr(device.runner, "optional", False):
                out.left_out.append((device, why))
                continue
            raise BadInput(f"device {device.id} ({device.runner.cpu_class}) cannot be presented on this host: "
                           f"{why}") from None
        if view.key in seen:
            out.left_out.append((device, f"the same class as {seen[view.key]} on this host ({view.label})"))
            continue
        seen[view.key] = device.id
        out.presented.append(ClassTarget(device, presentation, view))
    return out


def target_for(res: Resources, device: Device) -> ClassTarget:
    """One class device's target (its presentation and the view a runtime process reported)."""
    if device.runner.kind == "local":
        return ClassTarget(device, None, view_of(res, None))
    presentation = presentation_of(res, device, cpu_classes.read_view())
    return ClassTarget(device, presentation, view_of(res, presentation))


def speed_targets(res: Resources, registry: DeviceRegistry, devices: list[Device]) -> tuple[list[Device], list[tuple[Device, str]]]:
    """Of the devices a fan-out would benchmark, those this host can: a CPU-class device only where
    this host presents its class, once per class (an AVX2 host's `cpu-x86-avx2` is its `local-cpu`);
    a board or a phone as its runner reaches it. The rest with the reason, for the terminal."""
    if not any(is_class_device(d) and d.runner.kind != "local" for d in devices):
        return devices, []
    targets = class_targets(res, registry)
    presented = {t.device.id for t in targets.presented}
    why = {d.id: reason for d, reason in targets.left_out}
    keep = [d for d in devices if not is_class_device(d) or d.id in presented]
    return keep, [(d, why.get(d.id, "not a class this host presents")) for d in devices if d not in keep]


def benchmarked_here(res: Resources, registry: DeviceRegistry) -> list[Device]:
    """The enabled devices a build's fan-out benchmarks from this host (speed_targets of those that
    measure speed)."""
    return speed_targets(res, registry, [d for d in registry.enabled() if measures_speed(d)])[0]


def measures_speed(device: Device) -> bool:
    """Whether the fan-out benchmarks this device (an emulated class reports answers only)."""
    return RUNNERS.get(device.runner.kind).runner.measures_speed
