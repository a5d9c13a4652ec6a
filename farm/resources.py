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

    @cached_property
    def db(self) -> Database:
        return Database(self.settings.resolved_database_url)

    @cached_property
    def store(self) -> Store:
        return open_store(self.settings.resolved_store_url, self.settings)

    @cached_property
    def toolchain(self) -> Toolchain:
        return Toolchain(self.settings)

    @cached_property
    def toolchain_id(self) -> str:
        """Records the toolchain's exact versions in lineage; its digest is part of every cache key."""
        from farm.lineage.record import record_toolchain

        versions: dict[str, Any] = self.toolchain.identity
        with self.db.session() as s:
            return record_toolchain(s, versions)


    def use_runtime(self, version: str) -> None:
        """Run toolchain work on another litert-lm release (a variant env under FARM_CACHE)."""
        self.__dict__["toolchain"] = Toolchain(self.settings, runtime=version)
        self.__dict__.pop("toolchain_id", None)


@lru_cache(maxsize=1)
def get_resources() -> Resources:
    return Resources(get_settings())
