"""An arm64 CPU class, emulated by qemu-aarch64 (user mode) on this host: answers, never speed.

The arm64 build of the runtime (litert-lm-api's manylinux aarch64 wheel: pure ctypes, no
dependencies; ai_edge_litert and numpy for the Interpreter-driven gates) runs in an arm64 root the
farm makes once and keeps under FARM_CACHE/arm64/, named by the digest of what is in it:

1. `debootstrap --arch=arm64 --foreign --variant=minbase --include=python3.11-minimal,
   libpython3.11-stdlib bookworm`, every downloaded .deb unpacked with `dpkg -x` (no chroot and no
   binfmt_misc: nothing on the host changes);
2. the wheels, downloaded by the toolchain's pip for `manylinux_2_27_aarch64` at the toolchain's own
   versions, unzipped into /opt/farm/site;
3. per class, a view of that root (symlinks to it) with its own /proc/cpuinfo: qemu-aarch64 shows the
   host's x86 file otherwise, XNNPACK then finds no ARM cores and the Engine segfaults. The file names
   the class's cores (MIDR) and the hwcaps the qemu CPU model reports (read by running it).

Measured (2026-12-07, qemu 7.2): the tiny demo bundle answered as on the host under cortex-a76,
neoverse-n1 and `max,sme=off`; SmolLM2 decoded at 1.6-2.3 tokens/s (~11-16x slower than native);
`-cpu max` with SME diverged from its first tokens (untrustworthy in 7.2: not a class here). The fan-out
skips these devices (`measures_speed = False`): an emulator's tokens/s describe the emulator.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from farm.devices.protocol import BenchProtocol
from farm.devices.runners.base import DeviceError, Runner, RunOutput
from farm.devices.runners.registry import RUNNERS
from farm_common import cpu_classes
from farm_common.cpu_classes import NotPresentable

REPO_ROOT = Path(__file__).resolve().parents[3]
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
INCLUDE = ("python3.11-minimal", "libpython3.11-stdlib")
PYTHON = "/usr/bin/python3.11"
SITE = "/opt/farm/site"
WHEEL_TAG = "manylinux_2_27_aarch64"
# The runtime's wheels, at the toolchain env's versions (numpy and ai_edge_litert drive the
# Interpreter-based gates; litert-lm-api every Engine).
WHEELS = ("litert-lm-api", "ai-edge-litert", "numpy")
ROOT_RECIPE = 1  # bump when the way a root is made changes


class QemuArm64RunnerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["qemu_arm64"]
    cpu_class: str
    optional: bool = False  # as for cpuid_mask: leave it out, rather than refuse, where it cannot run
    qemu: Path = Path("/usr/bin/qemu-aarch64-static")
    # A build gates a file on this class only up to this size: emulation runs ~11-16x slower than
    # native (SmolLM2-135M's six questions took ~3.5 min, its arithmetic ~9 min), so a larger file's
    # gates here are `skipped` with the reason, and `farm gate SHA --device <id>` measures it anyway.
    max_bundle_mb: float | None = Field(64, gt=0)

    @field_validator("cpu_class")
    @classmethod
    def _known(cls, v: str) -> str:
        return cpu_classes.presented_by(v, "qemu")


def root_digest(versions: dict[str, str]) -> str:
    what = {"suite": SUITE, "include": INCLUDE, "wheels": {w: versions.get(w) for w in WHEELS},
            "tag": WHEEL_TAG, "recipe": ROOT_RECIPE}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def ensure_root(cache: Path, toolchain_python: Path, versions: dict[str, str], log: Path) -> Path:
    """The arm64 root for these runtime versions (made once; one maker at a time)."""
    base = cache / "arm64" / f"root-{root_digest(versions)}"
    if (base / ".farm-root-ready").exists():
        return base
    for tool in ("debootstrap", "dpkg"):
        if shutil.which(tool) is None:
            raise NotPresentable(f"{tool} is not installed: an arm64 root is made with it (apt-get install debootstrap)")
    base.parent.mkdir(parents=True, exist_ok=True)
    with open(base.parent / ".make-lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (base / ".farm-root-ready").exists():
            return base
        work = Path(tempfile.mkdtemp(prefix=f"{base.name}.part-", dir=base.parent))
        try:
            _make_root(work, toolchain_python, versions, log)
            shutil.rmtree(base, ignore_errors=True)
            work.rename(base)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        (base / ".farm-root-ready").write_text(json.dumps({w: versions.get(w) for w in WHEELS}) + "\n")
    return base


def _run_logged(argv: list[str], log: Path, what: str) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if code != 0:
        raise NotPresentable(f"{what} failed (exit {code}); its output: {log}")


def _make_root(work: Path, toolchain_python: Path, versions: dict[str, str], log: Path) -> None:
    _run_logged(["debootstrap", "--arch=arm64", "--foreign", "--variant=minbase", f"--include={','.join(INCLUDE)}",
                 SUITE, str(work), MIRROR], log, "debootstrap of the arm64 root")
    archives = work / "var" / "cache" / "apt" / "archives"
    for deb in sorted(archives.glob("*.deb")):
        _run_logged(["dpkg", "-x", str(deb), str(work)], log, f"unpacking {deb.name}")
        deb.unlink()
    wheels = work / "tmp" / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for name in WHEELS:
        version = versions.get(name)
        if not version:
            raise NotPresentable(f"the toolchain env has no {name}: cannot pick its arm64 wheel")
        _run_logged([str(toolchain_python), "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                     "--platform", WHEEL_TAG, "--python-version", "3.11", "-d", str(wheels), f"{name}=={version}"],
                    log, f"downloading the arm64 wheel of {name}=={version}")
    site = work / SITE.lstrip("/")
    site.mkdir(parents=True, exist_ok=True)
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
        whl.unlink()
    for so in site.rglob("*.so*"):  # zipfile keeps no modes: the loader needs nothing else, but be exact
        so.chmod(0o755)


def class_view(base: Path, cls: cpu_classes.CpuClass, qemu: Path) -> Path:
    """A view of the root for one class: the root's folders by symlink, its own /proc/cpuinfo."""
    view = base.with_name(f"{base.name}-{cls.id}")
    if (view / "proc" / "cpuinfo").is_file():
        return view
    caps = _hwcaps(base, cls, qemu)
    tmp = Path(tempfile.mkdtemp(prefix=f"{view.name}.part-", dir=base.parent))
    try:
        for entry in base.iterdir():
            if entry.name not in ("proc", ".farm-root-ready"):
                (tmp / entry.name).symlink_to(entry)
        (tmp / "proc").mkdir()
        (tmp / "proc" / "cpuinfo").write_text(cpu_classes.arm64_cpuinfo(cls.midr or 0, caps, cores=os.cpu_count() or 2))
        shutil.rmtree(view, ignore_errors=True)
        tmp.rename(view)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return view


def _hwcaps(base: Path, cls: cpu_classes.CpuClass, qemu: Path) -> list[str]:
    """The hwcaps qemu's CPU model reports, read by the root's Python under it."""
    code = ("import sys, json; sys.path.insert(0, %r); from farm_common import cpu_classes; "
            "print(json.dumps(cpu_classes.arm64_hwcaps()))" % str(REPO_ROOT))
    cp = subprocess.run([str(qemu), "-L", str(base), "-cpu", cls.qemu_cpu or "max", str(base) + PYTHON, "-c", code],
                        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if cp.returncode != 0:
        raise NotPresentable(f"qemu-aarch64 -cpu {cls.qemu_cpu} could not run the arm64 root's Python: "
                             f"{(cp.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


@RUNNERS.register("qemu_arm64", config=QemuArm64RunnerConfig, this_host=True)
class QemuArm64Runner(Runner):
    """Gates under an emulated arm64 class; no benchmark (an emulator's speed is not the class's)."""

    runs_gates = True
    measures_speed = False

    def cpu_class(self) -> cpu_classes.CpuClass:
        return cpu_classes.CLASSES[self.cfg.cpu_class]

    def presentation(self, res: Any, host: cpu_classes.CpuView) -> dict[str, Any]:
        """The class under qemu in the arm64 root of the toolchain's runtime versions (made on first use)."""
        cls = self.cpu_class()
        if not self.cfg.qemu.is_file():
            raise NotPresentable(f"{self.cfg.qemu} not found: arm64 classes run under qemu-aarch64 "
                                 "(apt-get install qemu-user-static)")
        log = res.settings.home / "logs" / f"arm64-root-{time.strftime('%Y%m%d-%H%M%S')}.log"
        base = ensure_root(res.settings.cache, res.toolchain.python, res.toolchain.versions["packages"], log)
        view = class_view(base, cls, self.cfg.qemu)
        expect = sorted(f for f in cpu_classes.ARM64_DISPATCH if f in _cpuinfo_features(view))
        return {"class_id": cls.id, "how": "qemu", "expect": expect, "qemu": str(self.cfg.qemu), "root": str(view),
                "qemu_cpu": cls.qemu_cpu, "python": PYTHON, "site": SITE}

    # The benchmark interface: an emulated class is never benchmarked (fan-out skips it).
    def push(self, local_path: str | os.PathLike, sha256: str) -> str:
        raise DeviceError(f"{self.device.id} is emulated: it reports answers, never speed or memory")

    def run(self, remote_path: str, protocol: BenchProtocol, accelerator: str) -> RunOutput:
        raise DeviceError(f"{self.device.id} is emulated: it reports answers, never speed or memory")

    def cleanup(self, remote_path: str | None = None) -> None:
        return None

    def env(self) -> dict[str, Any]:
        return {"runner": "qemu_arm64", "cpu_class": self.cfg.cpu_class, "qemu": str(self.cfg.qemu)}


def _cpuinfo_features(view: Path) -> set[str]:
    for line in (view / "proc" / "cpuinfo").read_text().splitlines():
        if line.startswith("Features"):
            return set(line.partition(":")[2].split())
    return set()
