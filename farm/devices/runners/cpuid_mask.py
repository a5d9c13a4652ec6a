"""An x86 CPU class below this host's, presented by CPUID masking, at native speed.

XNNPACK picks its kernels from CPUID and has no switch to force a lower instruction set; the farm's
shim (toolchain/cpuid_mask.c, preloaded) turns on Linux CPUID faulting and answers every CPUID
with the class's features cleared (farm_common/cpu_classes.py: CLASSES, mask_spec). The shim is
built with gcc once per source digest under FARM_CACHE/cpuid-mask/ (`farm toolchain install` builds
it too). Needs the kernel flag `cpuid_fault`; only removes features the host has.

Gates run under the class in a runtime host (farm_toolchain/cpu_class.py) with the same mask; the
benchmark runs the local `litert-lm` CLI with it (figures at native speed: the class's own kernels
on this host's cores, caches and memory — the card says which host).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from farm.devices.runners.local import LocalRunner
from farm.devices.runners.registry import RUNNERS
from farm_common import cpu_classes
from farm_common.cpu_classes import NotPresentable

SHIM_SOURCE = Path(__file__).resolve().parents[3] / "toolchain" / "cpuid_mask.c"


class CpuidMaskRunnerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["cpuid_mask"]
    cpu_class: str
    # true: left out (with a note in `farm devices`) where this host cannot present the class;
    # false: a build with the device enabled is refused in one line there.
    optional: bool = False

    @field_validator("cpu_class")
    @classmethod
    def _known(cls, v: str) -> str:
        return cpu_classes.presented_by(v, "cpuid_mask")


def shim_path(cache: Path) -> Path:
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:16]
    return cache / "cpuid-mask" / f"cpuid-mask-{digest}.so"


def ensure_shim(cache: Path) -> Path:
    """The built shim (gcc, once per source digest, one builder at a time)."""
    out = shim_path(cache)
    if out.is_file():
        return out
    gcc = shutil.which("gcc")
    if gcc is None:
        raise NotPresentable("gcc is not installed: the CPUID shim is built with it (apt-get install gcc)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".build-lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_file():
            return out
        tmp = out.with_suffix(".so.part")
        cp = subprocess.run([gcc, "-O2", "-shared", "-fPIC", "-Wall", "-o", str(tmp), str(SHIM_SOURCE), "-ldl"],
                            capture_output=True, text=True)
        if cp.returncode != 0:
            raise NotPresentable(f"building the CPUID shim failed: {(cp.stderr.strip().splitlines() or ['?'])[-1]}")
        tmp.rename(out)
    return out


@RUNNERS.register("cpuid_mask", config=CpuidMaskRunnerConfig, this_host=True)
class CpuidMaskRunner(LocalRunner):
    """This host's `litert-lm` with a lower x86 class presented."""

    def cpu_class(self) -> cpu_classes.CpuClass:
        return cpu_classes.CLASSES[self.cfg.cpu_class]

    def presentation(self, res: Any, host: cpu_classes.CpuView) -> dict[str, Any] | None:
        """The gate request's `cpu` field (farm_common/presentation.py); None where this host is the
        class (it runs natively: the same class as the local device); NotPresentable where it cannot be."""
        return self._present(res.settings.cache, host)

    def _present(self, cache: Path, host: cpu_classes.CpuView) -> dict[str, Any] | None:
        cls = self.cpu_class()
        clear = cpu_classes.mask_spec(cls, host, cpu_classes.host_flags())
        if not clear:
            return None
        return {"class_id": cls.id, "how": "cpuid_mask", "expect": list(cpu_classes.expected_view(cls, host)),
                "shim": str(ensure_shim(cache)), "clear": clear}

    def run_env(self) -> dict[str, str]:
        """The benchmark's environment: the shim preloaded with the class's bits."""
        from farm.settings import get_settings

        p = self._present(get_settings().cache, cpu_classes.read_view())
        if p is None:
            return {}
        return {"LD_PRELOAD": p["shim"], "CPUID_MASK_CLEAR": p["clear"]}
