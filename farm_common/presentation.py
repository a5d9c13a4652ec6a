"""How a CPU class is presented to the runtime: the `cpu` field of a gate request, written by the
orchestrator's class runners (farm/devices/runners/cpuid_mask.py, qemu_arm64.py) and read by the
toolchain (farm_toolchain/cpu_class.py), which starts the runtime host under it. Absent: the runtime
runs in the toolchain process itself, on the host's own class."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class Presentation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    class_id: str
    how: Literal["cpuid_mask", "qemu"]
    # The dispatch features the runtime must report (cpu_classes.CpuView.features): a host that came
    # up as anything else did not present the class, and nothing it answers is recorded as the class's.
    expect: tuple[str, ...]
    # cpuid_mask: the preloaded library and the CPUID bits it clears.
    shim: str | None = None
    clear: str | None = None
    # qemu: the emulator, the arm64 root (its /proc/cpuinfo names the class's cores), the -cpu model,
    # the root's Python and the folder inside the root holding the runtime's wheels.
    qemu: str | None = None
    root: str | None = None
    qemu_cpu: str | None = None
    python: str | None = None
    site: str | None = None

    def key(self) -> str:
        return self.model_dump_json()
