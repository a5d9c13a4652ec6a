"""The device registry: which machines every bundle is benchmarked on, how to reach them, and the
benchmark protocol each one runs. Loaded from infra/devices.yaml (or $FARM_DEVICES_FILE).

The registry is configuration: nothing in it is measured. The one exception is the `local-cpu`
device, which is synthesized from this host (/proc/meminfo, /proc/cpuinfo, platform) when the file
does not list it, and whose missing facts (soc, ram_mb, os) are filled from this host when it does.
A device is only "verified" by the records its runs produce (farm.devices.run_benchmark).
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from farm.errors import BadInput

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = REPO_ROOT / "infra" / "devices.yaml"
LOCAL_ID = "local-cpu"

Accelerator = Literal["cpu", "gpu", "npu"]
CacheMode = Literal["no", "memory", "disk"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchProtocol(_Strict):
    """What one benchmark invocation does. Desktop/Linux CLI: `litert-lm benchmark -p -d --runs
    --cache [--max-num-tokens] [--cpu-thread-count]`; Android binary: `--benchmark
    --benchmark_prefill_tokens --benchmark_decode_tokens --num_iterations`."""

    prefill_tokens: int = Field(256, gt=0)
    decode_tokens: int = Field(256, gt=0)
    runs: int = Field(3, ge=1)
    # "no" recompiles every run (the seeds' house setting); "memory" keeps the compile cache in RAM
    # for the life of the process (the Pi 5 setting: --cache no OOM-kills >= 1.2B files on 8 GB);
    # "disk" writes a cache file next to the bundle (a later run then measures a warm init).
    cache_mode: CacheMode = "no"
    threads: int | None = Field(None, ge=1)
    max_num_tokens: int | None = Field(None, gt=0)
    timeout_s: float = Field(1800, gt=0)
    warmup: bool = True
    # The seeds' Android harness stops a run when free memory falls under 400,000 KiB: a stopped run
    # is classified does_not_fit. None = no guard.
    min_free_kb: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _fits(self) -> "BenchProtocol":
        if self.max_num_tokens is not None and self.prefill_tokens + self.decode_tokens > self.max_num_tokens:
            raise ValueError(
                f"prefill_tokens + decode_tokens ({self.prefill_tokens} + {self.decode_tokens}) exceed "
                f"max_num_tokens ({self.max_num_tokens})"
            )
        return self

    def fit_context(self, context_tokens: int) -> "BenchProtocol":
        """This protocol shrunk to a bundle whose KV cache holds `context_tokens` (the runtime refuses
        a prompt of >= max tokens: "Input token ids are too long ... 32 >= 8"). Unchanged if it fits."""
        if self.prefill_tokens + self.decode_tokens < context_tokens and (
            self.max_num_tokens is None or self.max_num_tokens <= context_tokens
        ):
            return self
        budget = context_tokens - 1
        prefill = max(1, min(self.prefill_tokens, budget * self.prefill_tokens // (self.prefill_tokens + self.decode_tokens)))
        decode = max(1, min(self.decode_tokens, budget - prefill))
        return self.model_copy(update={"prefill_tokens": prefill, "decode_tokens": decode, "max_num_tokens": context_tokens})


class LocalRunnerConfig(_Strict):
    kind: Literal["local"]
    # Default: the `litert-lm` next to the toolchain python (Path(toolchain_python).parent / "litert-lm").
    litert_lm_path: Path | None = None
    work_dir: Path | None = None  # where bundles are linked/copied and HOMEs made; default a temp dir


class SshRunnerConfig(_Strict):
    kind: Literal["ssh"]
    host: str
    port: int = Field(22, gt=0, lt=65536)
    user: str
    key_path: Path
    remote_dir: str = "/tmp/litertlm-farm"
    litert_lm_path: str = "litert-lm"
    python: str = "python3"  # runs the stdlib wrapper that measures peak RSS on the device
    connect_timeout_s: int = Field(10, gt=0)
    known_hosts_path: Path | None = None  # default: ssh's own (~/.ssh/known_hosts)

    @field_validator("key_path", "known_hosts_path")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return v.expanduser() if v is not None else None

    @field_validator("user", "host")
    @classmethod
    def _not_an_option(cls, v: str, info) -> str:
        # ssh would parse "-oProxyCommand=…" as an option: a user or host is a name, never a flag.
        pattern = r"[A-Za-z0-9_.][A-Za-z0-9_.-]*" if info.field_name == "user" else r"[A-Za-z0-9_.:\[\]][A-Za-z0-9_.:\[\]-]*"
        if not re.fullmatch(pattern, v):
            raise ValueError(f"{info.field_name} {v!r} is not a plain {info.field_name} name")
        return v

    @field_validator("remote_dir")
    @classmethod
    def _absolute_dir(cls, v: str) -> str:
        if not v.startswith("/") or v.rstrip("/") in ("", "/tmp", "/home", "/root"):
            raise ValueError(f"remote_dir must be an absolute folder of the farm's own, not {v!r}")
        return v.rstrip("/")


class AdbRunnerConfig(_Strict):
    kind: Literal["adb"]
    serial: str
    remote_dir: str = "/data/local/tmp/litertlm-farm"
    # The LiteRT-LM Android benchmark binary on the device (litert_lm_main / litert_lm_advanced_main).
    binary_path: str = "/data/local/tmp/litertlm-farm/litert_lm_main"
    local_binary: Path | None = None  # pushed (sha256-verified) to binary_path when set
    # What the binary is: runtime_version short (a version, <= 32 chars, e.g. "0.16.0"), runtime_label
    # free text (e.g. "prebuilt litert_lm_advanced_main 2026-09-18"). Without a version the record
    # carries "bin-sha256:<16 hex>" of the binary on the phone.
    runtime_version: str | None = Field(None, max_length=32)
    runtime_label: str | None = None
    adb_path: str = "adb"
    extra_args: list[str] = Field(default_factory=list)
    memory_poll_s: float = Field(2.0, gt=0)  # the seeds' harness read free memory every 2 s

    @field_validator("remote_dir")
    @classmethod
    def _absolute_dir(cls, v: str) -> str:
        if not v.startswith("/") or v.rstrip("/") in ("", "/data", "/data/local/tmp", "/sdcard"):
            raise ValueError(f"remote_dir must be an absolute folder of the farm's own, not {v!r}")
        return v.rstrip("/")


RunnerConfig = Annotated[Union[LocalRunnerConfig, SshRunnerConfig, AdbRunnerConfig], Field(discriminator="kind")]


class Device(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    name: str
    soc: str | None = None
    ram_mb: int | None = Field(None, gt=0)
    os: str | None = None
    accelerators: list[Accelerator] = Field(min_length=1)
    runner: RunnerConfig
    work_pool: str = "devices"
    work_queue: str | None = None  # default: the device id
    protocol: BenchProtocol = Field(default_factory=BenchProtocol)
    enabled: bool = True
    notes: str = ""

    @field_validator("accelerators")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"accelerators repeat an entry: {v}")
        return v

    @model_validator(mode="after")
    def _facts(self) -> "Device":
        if self.runner.kind != "local":
            missing = [f for f in ("soc", "ram_mb", "os") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"an {self.runner.kind} device needs {', '.join(missing)}")
        return self

    @property
    def queue(self) -> str:
        return self.work_queue or self.id


class Registry(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: Path | None
    devices: dict[str, Device]

    def get(self, device_id: str) -> Device:
        try:
            return self.devices[device_id]
        except KeyError:
            raise BadInput(
                f"unknown device {device_id!r} (registered: {', '.join(sorted(self.devices)) or 'none'})"
            ) from None

    def enabled(self) -> list[Device]:
        """The devices a fan-out benchmarks on (examples ship with enabled: false)."""
        return [d for d in self.devices.values() if d.enabled]

    def targets(self) -> list[tuple[Device, str]]:
        """Every (device, accelerator) pair of the enabled devices."""
        return [(d, a) for d in self.enabled() for a in d.accelerators]


# --- this host -------------------------------------------------------------------------------


def host_facts() -> dict[str, Any]:
    """soc / ram_mb / os of this machine, read from /proc and platform (Linux; fallbacks elsewhere)."""
    ram_mb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_mb = int(line.split()[1]) // 1024
                break
    except OSError:
        pass
    soc = None
    for p in ("/proc/device-tree/model",):
        try:
            soc = Path(p).read_text().strip("\x00\n ") or None
        except OSError:
            pass
    if soc is None:
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                key, _, val = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Model") and val.strip():
                    soc = val.strip()
                    break
        except OSError:
            pass
    return {
        "soc": soc or platform.processor() or platform.machine() or None,
        "ram_mb": ram_mb,
        "os": platform.platform(),
    }


def local_device(**overrides: Any) -> Device:
    facts = host_facts()
    data = {
        "id": LOCAL_ID,
        "name": f"this host ({platform.node() or 'local'}), CPU",
        "accelerators": ["cpu"],
        "runner": {"kind": "local"},
        **facts,
        **overrides,
    }
    return Device.model_validate(data)


# --- loading ---------------------------------------------------------------------------------


def default_path() -> Path:
    env = os.environ.get("FARM_DEVICES_FILE")
    return Path(env).expanduser() if env else DEFAULT_FILE


def _one_line(err: ValidationError, label: str) -> str:
    parts = []
    for e in err.errors()[:3]:
        loc = ".".join(str(x) for x in e["loc"] if not (isinstance(x, str) and x in ("local", "ssh", "adb")))
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = f" (+{err.error_count() - 3} more)" if err.error_count() > 3 else ""
    return f"{label}: " + "; ".join(parts) + more


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_registry(path: str | os.PathLike | None = None, *, synthesize_local: bool = True) -> Registry:
    """Read the registry file. Any problem is one BadInput line naming the file, the device and the
    field. `local-cpu` is added from this host when the file does not list it."""
    p = Path(path).expanduser() if path is not None else default_path()
    try:
        raw = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"device registry {p} does not exist") from None
    except (OSError, yaml.YAMLError) as e:
        raise BadInput(f"device registry {p} is not readable YAML: {' '.join(str(e).split())}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict) or not isinstance(raw.get("devices", []), list):
        raise BadInput(f"device registry {p}: expected a mapping with a `devices:` list")
    unknown = set(raw) - {"defaults", "devices"}
    if unknown:
        raise BadInput(f"device registry {p}: unknown top-level key(s) {', '.join(sorted(map(str, unknown)))}")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict) or set(defaults) - {"protocol"}:
        raise BadInput(f"device registry {p}: `defaults` may only hold `protocol`")
    default_protocol = defaults.get("protocol") or {}
    devices: dict[str, Device] = {}
    for i, entry in enumerate(raw.get("devices") or []):
        label = f"device registry {p}: devices[{i}]"
        if not isinstance(entry, dict):
            raise BadInput(f"{label}: expected a mapping, got {type(entry).__name__}")
        if isinstance(entry.get("id"), str):
            label += f" ({entry['id']})"
        entry = dict(entry)
        if default_protocol:
            entry["protocol"] = _merge(default_protocol, entry.get("protocol") or {})
        try:
            if entry.get("id") == LOCAL_ID and (entry.get("runner") or {}).get("kind") == "local":
                facts = {k: v for k, v in host_facts().items() if entry.get(k) is None}
                entry.update(facts)
            dev = Device.model_validate(entry)
        except ValidationError as e:
            raise BadInput(_one_line(e, label)) from None
        if dev.id in devices:
            raise BadInput(f"{label}: device id {dev.id!r} is listed twice")
        devices[dev.id] = dev
    if synthesize_local and LOCAL_ID not in devices:
        protocol = BenchProtocol.model_validate(default_protocol) if default_protocol else BenchProtocol()
        devices[LOCAL_ID] = local_device(protocol=protocol)
    return Registry(path=p, devices=devices)

