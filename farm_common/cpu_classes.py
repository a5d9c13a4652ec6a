"""CPU classes: the instruction sets a runtime's kernels are picked by, read as a process sees them.

The same bytes answer differently on another CPU: XNNPACK (inside litert-lm and ai_edge_litert)
chooses its kernels from CPUID on x86 (AVX2, AVX-512, AVX-512 VNNI, BF16, FP16, AMX) and from the
kernel's hwcaps on arm64 (dotprod, i8mm, SVE2, SME). A result therefore names the class it ran on,
and a class is what decides the kernels: the dispatch-relevant features present, read *inside* the
process that ran the runtime (`read_view`), so a masked or emulated class reports what it presented,
not what the host has.

This module is the one room of the concept, imported by both environments and by the arm64 runtime
host under qemu (standard library only, nothing else, at module level):
- the feature tables (x86 CPUID bits, arm64 hwcap bits) and the reader;
- `CpuView`: a process's view (arch, features, class key, label);
- `CLASSES`: the classes the farm can present on a host that lacks them — x86 classes by CPUID
  masking (toolchain/cpuid_mask.c, features removed from the host's), arm64 classes under
  qemu-aarch64 (a CPU model and the /proc/cpuinfo the runtime reads);
- `mask_spec`: the CPUID bits to clear for a class on a given host, or why it cannot be presented.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

# --- x86: CPUID (leaf, subleaf, register, bit), named as Linux's /proc/cpuinfo names them --------

X86_FEATURES: dict[str, tuple[int, int, str, int]] = {
    "fma": (1, 0, "ecx", 12),
    "avx": (1, 0, "ecx", 28),
    "f16c": (1, 0, "ecx", 29),
    "avx2": (7, 0, "ebx", 5),
    "avx512f": (7, 0, "ebx", 16),
    "avx512dq": (7, 0, "ebx", 17),
    "avx512ifma": (7, 0, "ebx", 21),
    "avx512cd": (7, 0, "ebx", 28),
    "avx512bw": (7, 0, "ebx", 30),
    "avx512vl": (7, 0, "ebx", 31),
    "avx512vbmi": (7, 0, "ecx", 1),
    "avx512vbmi2": (7, 0, "ecx", 6),
    "gfni": (7, 0, "ecx", 8),
    "avx512vnni": (7, 0, "ecx", 11),
    "avx512bitalg": (7, 0, "ecx", 12),
    "avx512vpopcntdq": (7, 0, "ecx", 14),
    "avx512vp2intersect": (7, 0, "edx", 8),
    "amx_bf16": (7, 0, "edx", 22),
    "avx512fp16": (7, 0, "edx", 23),
    "amx_tile": (7, 0, "edx", 24),
    "amx_int8": (7, 0, "edx", 25),
    "avxvnni": (7, 1, "eax", 4),
    "avx512bf16": (7, 1, "eax", 5),
    "amx_fp16": (7, 1, "eax", 21),
    "avxifma": (7, 1, "eax", 23),
    "avxvnniint8": (7, 1, "edx", 4),
    "avxneconvert": (7, 1, "edx", 5),
    "avxvnniint16": (7, 1, "edx", 10),
    "avx10": (7, 1, "edx", 19),
}
REGISTERS = ("eax", "ebx", "ecx", "edx")

# --- arm64: hwcaps (AT_HWCAP = 16, AT_HWCAP2 = 26), named as Linux's /proc/cpuinfo names them ----

ARM64_HWCAP = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
               "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca "
               "pacg").split()
ARM64_HWCAP2 = ("dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm "
                "svebf16 i8mm bf16 dgh rng bti mte ecv afp rpres mte3 sme smei16i64 smef64f64 smei8i32 "
                "smef16f32 smeb16f32 smef32f32 smefa64 wfxt").split()
# What XNNPACK's arm64 dispatch reads (cpuinfo's isa flags): the class key is made of these.
ARM64_DISPATCH = ("asimd", "asimdhp", "asimddp", "asimdfhm", "i8mm", "bf16", "sve", "sve2", "sme")


@dataclass(frozen=True)
class CpuView:
    """What one process saw: its architecture, the dispatch-relevant features present, the host it
    ran on, and how the class was presented (native | cpuid_mask | qemu)."""

    arch: str
    features: tuple[str, ...]
    host: str
    how: str = "native"
    hwcaps: tuple[str, ...] = field(default=(), compare=False)  # arm64: the whole hwcap list

    @property
    def key(self) -> str:
        """The reuse key: the instruction sets the kernels are chosen by (not the host: two hosts of
        one class run the same kernels)."""
        return f"{self.arch}:{'+'.join(self.features)}"

    @property
    def label(self) -> str:
        return label(self.arch, self.features)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(features=list(self.features), hwcaps=list(self.hwcaps), key=self.key, label=self.label)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CpuView":
        return cls(arch=d["arch"], features=tuple(d["features"]), host=d.get("host", "?"),
                   how=d.get("how", "native"), hwcaps=tuple(d.get("hwcaps") or ()))


def label(arch: str, features: tuple[str, ...] | list[str]) -> str:
    """A reader's name for a class: 'x86-64 AVX2', 'x86-64 AVX-512 VNNI BF16', 'arm64 dotprod'."""
    f = set(features)
    if arch == "x86_64":
        if "avx512f" in f:
            name = "AVX-512 VNNI" if "avx512vnni" in f else "AVX-512"
            extras = [n for n, k in (("BF16", "avx512bf16"), ("FP16", "avx512fp16"), ("AMX", "amx_tile")) if k in f]
        elif "avx2" in f:
            name, extras = "AVX2", ["AVX-VNNI"] if "avxvnni" in f else []
        else:
            name, extras = ("AVX" if "avx" in f else "SSE"), []
        return " ".join(["x86-64", name, *extras])
    if arch == "aarch64":
        parts = ["arm64"]
        parts += [n for n, k in (("SME", "sme"), ("SVE2", "sve2"), ("i8mm", "i8mm"), ("dotprod", "asimddp"))
                  if k in f] or ["NEON"]
        return " ".join(parts)
    return f"{arch} ({', '.join(sorted(f)) or 'no features read'})"


# --- reading a process's own view ----------------------------------------------------------------

# x86-64 System V: cpuid(leaf=edi, subleaf=esi, out=rdx) -> out[0..3] = eax, ebx, ecx, edx.
# push rbx; mov r8, rdx; mov eax, edi; mov ecx, esi; cpuid; mov [r8], eax; mov [r8+4], ebx;
# mov [r8+8], ecx; mov [r8+12], edx; pop rbx; ret
_CPUID_CODE = bytes.fromhex("53" "4989d0" "89f8" "89f1" "0fa2" "418900" "41895804" "41894808" "4189500c" "5b" "c3")


def _cpuid_reader():
    """The CPUID instruction itself, executed by this process (so a masked class answers masked)."""
    buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(_CPUID_CODE)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32 * 4))(
        ctypes.addressof(ctypes.c_char.from_buffer(buf)))

    def cpuid(leaf: int, subleaf: int) -> tuple[int, int, int, int]:
        out = (ctypes.c_uint32 * 4)()
        fn(leaf, subleaf, ctypes.byref(out))
        return tuple(out)

    cpuid.keep = buf  # the code page lives as long as the reader
    return cpuid


def x86_features(cpuid=None) -> tuple[str, ...]:
    cpuid = cpuid or _cpuid_reader()
    max_leaf = cpuid(0, 0)[0]
    regs: dict[tuple[int, int], tuple[int, ...]] = {}
    present = []
    for name, (leaf, sub, reg, bit) in X86_FEATURES.items():
        if leaf > max_leaf or (leaf == 7 and sub > 0 and sub > regs.setdefault((7, 0), cpuid(7, 0))[0]):
            continue
        values = regs.setdefault((leaf, sub), cpuid(leaf, sub))
        if values[REGISTERS.index(reg)] >> bit & 1:
            present.append(name)
    return tuple(sorted(present))


def arm64_hwcaps() -> tuple[str, ...]:
    libc = ctypes.CDLL(None)
    libc.getauxval.restype = ctypes.c_ulong
    libc.getauxval.argtypes = [ctypes.c_ulong]
    caps, caps2 = libc.getauxval(16), libc.getauxval(26)
    return tuple([n for i, n in enumerate(ARM64_HWCAP) if caps >> i & 1]
                 + [n for i, n in enumerate(ARM64_HWCAP2) if caps2 >> i & 1])


def read_view(how: str = "native") -> CpuView:
    """This process's CPU class, read the way the runtime reads it (CPUID / getauxval)."""
    arch = platform.machine()
    host = socket.gethostname()
    if arch in ("x86_64", "AMD64"):
        return CpuView("x86_64", x86_features(), host, how)
    if arch in ("aarch64", "arm64"):
        caps = arm64_hwcaps()
        return CpuView("aarch64", tuple(sorted(f for f in ARM64_DISPATCH if f in caps)), host, how, caps)
    return CpuView(arch, (), host, how)


# --- classes the farm presents -------------------------------------------------------------------


@dataclass(frozen=True)
class CpuClass:
    """A class the farm can present. x86 (`how` cpuid_mask): `keep` is every dispatch feature the
    class has; the host must have them all, and every other feature of X86_FEATURES is cleared.
    arm64 (`how` qemu): `qemu_cpu` is the qemu-aarch64 -cpu model, `midr` the MIDR its /proc/cpuinfo
    names (XNNPACK reads the cores from that file)."""

    id: str
    arch: str
    how: str
    description: str
    keep: frozenset[str] = frozenset()
    qemu_cpu: str | None = None
    midr: int | None = None


_SKX = frozenset({"fma", "avx", "f16c", "avx2", "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"})
CLASSES: dict[str, CpuClass] = {c.id: c for c in (
    CpuClass("x86-avx2", "x86_64", "cpuid_mask", "x86-64 with AVX2 and FMA, no AVX-512 or VNNI (Haswell to "
             "Comet Lake, AMD Zen 1-3)", keep=frozenset({"fma", "avx", "f16c", "avx2"})),
    CpuClass("x86-avx512", "x86_64", "cpuid_mask", "x86-64 AVX-512 F/CD/BW/DQ/VL without VNNI (Skylake-SP/X)",
             keep=_SKX),
    CpuClass("x86-avx512-vnni", "x86_64", "cpuid_mask", "x86-64 AVX-512 with VNNI, no BF16/FP16/AMX "
             "(Cascade Lake)", keep=_SKX | {"avx512vnni"}),
    CpuClass("arm64-dotprod", "aarch64", "qemu", "arm64 Cortex-A76 (Armv8.2 + dotprod: Raspberry Pi 5, "
             "2019-2021 phone big cores), emulated", qemu_cpu="cortex-a76", midr=0x414FD0B1),
    CpuClass("arm64-armv9", "aarch64", "qemu", "arm64 Armv9 (SVE2, i8mm, BF16; no SME: 2022+ phone cores), "
             "emulated", qemu_cpu="max,sme=off", midr=0x000F0510),
)}


def presented_by(class_id: str, how: str) -> str:
    """`class_id` if it names a class presented `how` (a runner config's validator), else ValueError."""
    known = [c.id for c in CLASSES.values() if c.how == how]
    if class_id not in known:
        raise ValueError(f"cpu_class {class_id!r} is not a class presented by {how} (one of {', '.join(known)})")
    return class_id


class NotPresentable(Exception):
    """This host cannot present the class (the reason is one line a user can act on)."""


def host_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The kernel's flags line of this host (x86): `cpuid_fault` says CPUID faulting is available."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def is_host_class(cls: CpuClass, host: CpuView) -> bool:
    """Whether a host with `host`'s features already is the x86 class `cls` (an AVX2-only host for
    x86-avx2): the class runs natively there, masked or not."""
    return cls.how == "cpuid_mask" and host.arch == cls.arch == "x86_64" and set(host.features) == set(cls.keep)


def mask_spec(cls: CpuClass, host: CpuView, flags: set[str]) -> str:
    """The CPUID_MASK_CLEAR value presenting `cls` on a host with `host`'s features and kernel `flags`
    ("leaf.subleaf.reg=hexmask,..."; "" where the host is the class), or NotPresentable with the reason."""
    if cls.how != "cpuid_mask":
        raise NotPresentable(f"{cls.id} is not presented by CPUID masking")
    if host.arch != "x86_64":
        raise NotPresentable(f"{cls.id} needs an x86-64 host; this one is {host.arch}")
    if is_host_class(cls, host):
        return ""  # the host is this class: nothing to clear, no faulting needed (presented natively)
    if "cpuid_fault" not in flags:
        raise NotPresentable(f"this host's kernel lists no cpuid_fault (/proc/cpuinfo flags): CPUID faulting, "
                             f"which presents {cls.id} at native speed, is unavailable here (a VM without it, "
                             f"or an older CPU); disable the {cls.id} device on this host")
    missing = sorted(cls.keep - set(host.features))
    if missing:
        raise NotPresentable(f"{cls.id} needs {', '.join(missing)}, which this host ({host.label}) lacks: masking "
                             "only removes features; run this class on a host that has them")
    clear: dict[tuple[int, int, str], int] = {}
    for name, (leaf, sub, reg, bit) in X86_FEATURES.items():
        if name not in cls.keep:
            clear[(leaf, sub, reg)] = clear.get((leaf, sub, reg), 0) | (1 << bit)
    return ",".join(f"{leaf:x}.{sub:x}.{reg}={m:#x}" for (leaf, sub, reg), m in sorted(clear.items()))


def expected_view(cls: CpuClass, host: CpuView) -> tuple[str, ...]:
    """The features a masked process should report: the host's, less what the mask clears."""
    return tuple(sorted(f for f in host.features if f in cls.keep))


def arm64_cpuinfo(midr: int, hwcaps: tuple[str, ...] | list[str], cores: int = 2) -> str:
    """An arm64 /proc/cpuinfo for an emulated root: the cores XNNPACK finds (MIDR) and the features
    line (the hwcaps qemu's CPU model reports)."""
    block = (f"BogoMIPS\t: 50.00\nFeatures\t: {' '.join(hwcaps)}\nCPU implementer\t: {midr >> 24 & 0xFF:#04x}\n"
             f"CPU architecture: 8\nCPU variant\t: {midr >> 20 & 0xF:#x}\nCPU part\t: {midr >> 4 & 0xFFF:#05x}\n"
             f"CPU revision\t: {midr & 0xF}\n")
    return "".join(f"processor\t: {i}\n{block}\n" for i in range(cores))
