"""Where the farm keeps its state. Environment variables override the embedded defaults.

FARM_HOME   (default ~/.farm)        lineage DB, local artifact store, Prefect's state: a fresh
                                     FARM_HOME is a fresh farm.
FARM_CACHE  (default ~/.cache/farm)  reusable caches: toolchain envs, generated and downloaded
                                     models. Safe to share between farms.
FARM_DATABASE_URL                    SQLAlchemy URL (default sqlite:///$FARM_HOME/lineage.db)
FARM_STORE_URL                       file:///path or s3://bucket/prefix (default file://$FARM_HOME/store)
FARM_S3_ENDPOINT_URL                 S3-compatible endpoint (MinIO, moto); credentials come from the
                                     usual AWS_* variables.
FARM_TOOLCHAIN_PYTHON                use this interpreter as the toolchain env instead of the one
                                     `farm toolchain install` made under FARM_CACHE.
FARM_DEVICES_FILE                    the device registry (default infra/devices.yaml)
FARM_PREFECT_PORT (default 4277)     the embedded Prefect server's port (UI at http://127.0.0.1:PORT)
FARM_PREFECT_SERVER (default local)  local: that server, started on first use and reused;
                                     temporary: Prefect's own per-command server. PREFECT_API_URL
                                     (another server) wins over both.
FARM_DB_RETRY_SECONDS (default 30)   how long a transient lineage-database failure is retried
FARM_LEASE_HEARTBEAT_SECONDS (20)    how often a lease holder renews its lease (farm/leases.py)
FARM_LEASE_STALE_SECONDS (120)       after how long without a renewal a lease holder on any host is
                                     presumed dead and its lease broken (at least 2 heartbeats)
FARM_S3_CACHE_MAX_GB (default 50)    the bound of the local copies of S3 objects (0: none)
FARM_DEVICE_HOST_SILENT_S (90)       a device's host is down when no worker polled its queue this long
FARM_EXPORT_CACHE (default: none)    a folder of float exports shared by farms on this machine, keyed
                                     by the convert stage's key (farm/export_cache.py); unset or "": off
FARM_RECHECK_CONCURRENCY (default 2) sibling re-checks at once; FARM_INDEX_URL, FARM_REVALIDATE_
INTERVAL_S, FARM_MAX_MEMORY_GB, FARM_BUILD_DEADLINE, FARM_ZOMBIE_AFTER_S, FARM_MEASURE_KNOWN_FAILURES: see
the fields below.

This module is the farm's only reader of FARM_* variables: everything else takes a `Settings` (in
its Resources). An entry point changes a setting for its own process with `override` (the CLI's
--max-minutes / --max-memory-gb), never by writing os.environ.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from farm.errors import BadInput


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FARM_", extra="ignore")

    home: Path = Field(default_factory=lambda: Path.home() / ".farm")
    cache: Path = Field(default_factory=lambda: Path.home() / ".cache" / "farm")
    database_url: str | None = None
    store_url: str | None = None
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    toolchain_python: Path | None = None
    # The device registry (farm/devices/registry.py); None: the shipped infra/devices.yaml.
    devices_file: Path | None = None
    # Sibling re-checks run as their own flow runs, at most this many at once (a Prefect global
    # concurrency limit "farm-recheck", created with this value on first use; change it in the UI).
    recheck_concurrency: int = Field(2, ge=1)
    # The embedded default's Prefect server (farm/ops/server.py): started in the background on first use
    # on 127.0.0.1:<prefect_port> and reused; "temporary" = Prefect's own per-command server.
    # PREFECT_API_URL, when set, wins over both.
    prefect_port: int = Field(4277, ge=1, le=65535)
    prefect_server: Literal["local", "temporary"] = "local"
    # Re-validation: the package index read for new litert-lm releases (None: the one pip is
    # configured with) and how often the served `revalidate` deployment runs.
    index_url: str | None = None
    revalidate_interval_s: int = Field(3600, ge=60)
    # Caps on a build (`farm build --max-minutes / --max-memory-gb` set these for their process):
    # the toolchain is stopped with a clear error when its resident memory passes max_memory_gb
    # (before the kernel's OOM killer picks a process) or when the clock passes build_deadline
    # (epoch seconds). max_memory_gb is also the memory the too-large refusal compares against.
    max_memory_gb: float | None = Field(None, gt=0)
    build_deadline: float | None = None
    # Faults: how long a new lineage-database connection retries a transient failure (farm/lineage/
    # db.py); how often a lease holder renews its lease, and after how long silent (no renewal, by
    # the database's clock) its holder is presumed dead, whatever its host (farm/leases.py).
    db_retry_seconds: float = Field(30.0, ge=0)
    # The local copies of S3 objects (FARM_CACHE/s3-objects) are a cache of this many GB at most,
    # the least recently used evicted first (farm/store/s3.py); 0: unbounded.
    s3_cache_max_gb: float = Field(50.0, ge=0)
    lease_heartbeat_seconds: float = Field(20.0, gt=0)
    lease_stale_seconds: float = Field(120.0, gt=0)
    # A bench-one run silent this long (no heartbeat, none final; heartbeats every 30 s) is Crashed
    # by the automation `farm deploy-devices` keeps (flows/fanout.py): a worker died with its run.
    zombie_after_s: int = Field(90, ge=40)
    # A device of another host whose work queue no worker has polled for this long is reported
    # host_down by a build's fan-out (its run is not queued for a worker that is not there).
    device_host_silent_s: float = Field(90.0, ge=1)
    # Float exports shared by farms that share no lineage (several FARM_HOMEs on one machine: the test
    # suite's, a user's experiments): the convert stage replays an export recorded here under its
    # own key instead of running litert-torch again. None (the default): every farm exports for
    # itself. `farm rebuild` never reads it (it re-runs the converter to compare bytes).
    export_cache: Path | None = None
    # Build a family's stage even where its KnownFailure says it fails with the installed tool
    # (farm/preflight.py check_known_failures): how the family matrix measures it again.
    measure_known_failures: bool = False

    @field_validator("home", "cache")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        # file:// store URLs and sqlite:/// URLs need absolute paths; a relative FARM_HOME is the
        # caller's cwd-relative intent, so resolve it once here.
        return v.expanduser().resolve()

    @field_validator("export_cache", mode="before")
    @classmethod
    def _empty_is_off(cls, v: Any) -> Any:
        # FARM_EXPORT_CACHE= (empty) turns it off for one command under an environment that sets it.
        return None if v in ("", None) else Path(str(v)).expanduser().resolve()

    @field_validator("lease_stale_seconds")
    @classmethod
    def _after_two_beats(cls, v: float, info) -> float:
        # A bound under two heartbeats breaks live holders whose one renewal came late.
        beat = info.data.get("lease_heartbeat_seconds")
        if beat is not None and v < 2 * beat:
            raise ValueError(f"must be at least twice the lease heartbeat ({beat:g} s)")
        return v

    @cached_property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'lineage.db'}"

    @cached_property
    def resolved_store_url(self) -> str:
        return self.store_url or f"file://{self.home / 'store'}"

    @property
    def prefect_home(self) -> Path:
        # Prefect's cache records and ephemeral DB live beside the farm's own state, so a fresh
        # FARM_HOME never sees cache hits that point at artifacts another farm stored.
        return self.home / "prefect"

    @property
    def work_dir(self) -> Path:
        """Scratch space for stage outputs before they enter the store."""
        return self.home / "work"


_overrides: dict[str, Any] = {}


def get_settings() -> Settings:
    """This process's settings: the FARM_* environment, under what its entry point overrode. A value
    that does not validate is bad input naming the variable."""
    try:
        return Settings(**_overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = "FARM_" + ".".join(str(x) for x in err["loc"]).upper()
        raise BadInput(f"{name}: {err['msg'].removeprefix('Value error, ')}: fix the variable") from None


def override(**values: Any) -> None:
    """Set this process's settings where its entry point says so (validated now: a bad value is bad
    input). Resources made after this see them; call it before any work."""
    Settings(**{**_overrides, **values})
    _overrides.update(values)
