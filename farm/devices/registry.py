"""The device registry: which machines every bundle is benchmarked on, how to reach them, and the
benchmark protocol each one runs. Loaded from infra/devices.yaml (or FARM_DEVICES_FILE, settings.devices_file).

The registry is configuration: nothing in it is measured. The one exception is the `local-cpu`
device, which is synthesized from this host (/proc/meminfo, /proc/cpuinfo, platform) when the file
does not list it, and whose missing facts (soc, ram_mb, os) are filled from this host when it does.
A device is only "verified" by the records its runs produce (farm/devices/bench.py).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from farm.devices.protocol import Accelerator, BenchProtocol
from farm.devices.runners.registry import RUNNERS
from farm.errors import BadInput

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = REPO_ROOT / "infra" / "devices.yaml"
LOCAL_ID = "local-cpu"


def _runner_config() -> Any:
    """A device's `runner:` section: one of the registered runners' configs, chosen by its `kind`."""
    configs = tuple(r.config for r in RUNNERS)
    return Annotated[Union[configs], Field(discriminator="kind")] if len(configs) > 1 else configs[0]


RunnerConfig = _runner_config()


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    name: str
    soc: str | None = None
    ram_mb: int | None = Field(None, gt=0)
    os: str | None = None
    accelerators: list[Accelerator] = Field(min_length=1)
    runner: RunnerConfig
    work_pool: str = "devices"
    work_queue: str | None = None  # default: the device id
    # The host the device belongs to (its hostname): the phone on its USB, the Pi on its desk, a
    # host's own CPU. A build on another host sends the device's runs to its work queue, which only
    # that host's devices worker serves (flows/fanout.py); None: whichever host runs the build
    # (local-cpu and the CPU classes: every host's own).
    host: str | None = None
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
        if not RUNNERS.get(self.runner.kind).this_host:
            missing = [f for f in ("soc", "ram_mb", "os") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"an {self.runner.kind} device needs {', '.join(missing)}")
        return self

    @property
    def queue(self) -> str:
        return self.work_queue or self.id

    def elsewhere(self) -> bool:
        """Whether the device belongs to another host than this process's."""
        import socket

        return self.host is not None and self.host != socket.gethostname()


class DeviceRegistry(BaseModel):
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
    from farm.settings import get_settings

    return get_settings().devices_file or DEFAULT_FILE


def _one_line(err: ValidationError, label: str) -> str:
    parts = []
    for e in err.errors()[:3]:
        loc = ".".join(str(x) for x in e["loc"] if not (isinstance(x, str) and x in RUNNERS))
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = f" (+{err.error_count() - 3} more)" if err.error_count() > 3 else ""
    return f"{label}: " + "; ".join(parts) + more


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_registry(path: str | Path | None = None, *, synthesize_local: bool = True) -> DeviceRegistry:
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
            kind = (entry.get("runner") or {}).get("kind")
            if entry.get("id") == LOCAL_ID and kind in RUNNERS and RUNNERS.get(kind).this_host:
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
    return DeviceRegistry(path=p, devices=devices)

