"""farm/devices/runners/cpuid_mask.py + toolchain/cpuid_mask.c: the shim, built with gcc, presents a
lower class to one process at native speed where the kernel can fault CPUID, and where it cannot the
process writes one line and exits 86 (never runs unmasked under a class's name). Which branch runs
depends on this host (the kernel's `cpuid_fault` flag); both are asserted, each where it applies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from farm.devices.runners.cpuid_mask import ensure_shim
from farm_common import cpu_classes as cc

ROOT = Path(__file__).resolve().parents[4]
READ = "import json; from farm_common.cpu_classes import read_view; print(json.dumps(read_view().features))"


def _run(shim: Path, clear: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LD_PRELOAD": str(shim), "CPUID_MASK_CLEAR": clear, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    return ensure_shim(tmp_path_factory.mktemp("cache"))


def test_the_shim_masks_where_the_kernel_can_fault_cpuid_and_refuses_where_it_cannot(shim):
    host = cc.read_view()
    if host.arch != "x86_64":
        pytest.skip("x86 CPUID masking: this host is not x86-64")
    # Clear AVX2 itself (leaf 7 EBX bit 5): a feature every x86 class of the farm keeps, so the mask is
    # visible on any AVX2 host.
    proc = _run(shim, "7.0.ebx=0x20")
    if "cpuid_fault" in cc.host_flags():
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
        assert "avx2" not in seen and "fma" in seen  # masked: only what the spec clears
    else:
        # No faulting here: the process never runs under the class's name, it says why in one line.
        assert proc.returncode == 86, (proc.returncode, proc.stderr)
        assert proc.stderr.strip().count("\n") == 0 and "no cpuid_fault" in proc.stderr
        assert proc.stdout == ""
    # The control: without a spec the shim leaves CPUID alone (the host's own features).
    plain = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "LD_PRELOAD": str(shim), "PYTHONPATH": str(ROOT)})
    assert plain.returncode == 0, plain.stderr
    assert tuple(json.loads(plain.stdout)) == host.features
