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
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FARM_", extra="ignore")

    home: Path = Field(default_factory=lambda: Path.home() / ".farm")
    cache: Path = Field(default_factory=lambda: Path.home() / ".cache" / "farm")
    database_url: str | None = None
    store_url: str | None = None
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    toolchain_python: Path | None = None
    # Sibling re-checks run as their own flow runs, at most this many at once (a Prefect global
    # concurrency limit "farm-recheck", created with this value on first use; change it in the UI).
    recheck_concurrency: int = Field(2, ge=1)

    @field_validator("home", "cache")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        # file:// store URLs and sqlite:/// URLs need absolute paths; a relative FARM_HOME is the
        # caller's cwd-relative intent, so resolve it once here.
        return v.expanduser().resolve()

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


def get_settings() -> Settings:
    return Settings()
