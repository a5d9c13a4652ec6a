"""Engine and sessions. The schema is always created by Alembic (never create_all), so a SQLite file
made by `farm build` and a PostgreSQL database made by `alembic upgrade head` are the same schema."""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from farm.errors import BadInput

REPO_ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS_DIR = REPO_ROOT / "migrations"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")  # concurrent readers while a build writes
            cur.close()

        return engine
    try:
        return create_engine(url, pool_pre_ping=True)
    except Exception as exc:  # noqa: BLE001 - e.g. a malformed URL or a missing driver
        raise BadInput(f"cannot use database URL {url!r}: {exc}; check FARM_DATABASE_URL") from exc


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str) -> None:
    """Bring the database to the newest schema (idempotent)."""
    from alembic import command

    command.upgrade(alembic_config(url), "head")


class Database:
    def __init__(self, url: str, migrate: bool = True):
        self.url = url
        self.engine = make_engine(url)
        if migrate:
            _upgrade_once(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise


@lru_cache(maxsize=None)
def _upgrade_once(url: str) -> None:
    upgrade(url)
