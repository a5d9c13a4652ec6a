"""The farm's resources for one process: settings, lineage DB, artifact store, toolchain.
Built from the environment (see farm/settings.py), so a Prefect worker on another host gets the
same wiring from its own FARM_* variables."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from farm.lineage.db import Database
from farm.settings import Settings, get_settings
from farm.store import Store, open_store
from farm.toolchain import Toolchain


@dataclass
class Resources:
    settings: Settings
    # The litert-lm release the toolchain runs (None: the lock's). A variant is a new Resources value
    # (`for_runtime`), never a mutation of a shared one, so a flow parameter carries it to a worker.
    runtime: str | None = None

    @cached_property
    def db(self) -> Database:
        return Database(self.settings.resolved_database_url, retry_seconds=self.settings.db_retry_seconds)

    @cached_property
    def store(self) -> Store:
        return open_store(self.settings.resolved_store_url, self.settings)

    @cached_property
    def toolchain(self) -> Toolchain:
        return Toolchain(self.settings, runtime=self.runtime)

    @cached_property
    def toolchain_id(self) -> str:
        """Records the toolchain's exact versions in lineage; its digest is part of every cache key."""
        from farm.lineage.record import record_toolchain

        versions: dict[str, Any] = self.toolchain.identity
        with self.db.session() as s:
            return record_toolchain(s, versions)

    def with_own_toolchain(self) -> "Resources":
        """The same farm with a toolchain process of its own: concurrent work (sibling re-checks in
        threads) would otherwise queue on one toolchain server."""
        return Resources(self.settings, runtime=self.runtime)


def get_resources(runtime: str | None = None) -> Resources:
    """This process's resources; with `runtime`, the same farm whose toolchain runs that litert-lm
    release (a variant env under FARM_CACHE, installed on first use). One per runtime per process:
    get_resources() and get_resources(None) are the same (one toolchain server, not two)."""
    return _resources(runtime)


@lru_cache(maxsize=None)
def _resources(runtime: str | None) -> Resources:
    return Resources(get_settings(), runtime=runtime)
