"""Engine and sessions. The schema is always created by Alembic (never create_all), so a SQLite file
made by `farm build` and a PostgreSQL database made by `alembic upgrade head` are the same schema.

Faults are data, not tracebacks:
- a new connection that fails for a transient reason (connection refused, the server starting up or
  shutting down, SQLite busy) is retried with bounded backoff (settings.db_retry_seconds,
  FARM_DB_RETRY_SECONDS, default 30):
  a PostgreSQL restart during a build costs a pause, not the build;
- what still fails is a `LineageUnavailable` (one line: which database, what it said, what to do);
- the schema is checked cheaply on open (the alembic_version row against SCHEMA_HEAD: one query, not
  Alembic's upgrade machinery), and migrated only when behind, serialized across processes (a
  PostgreSQL advisory lock; a file lock beside a SQLite database), so concurrent first builds into
  one fresh database do not race to create it.
"""

from __future__ import annotations

import fcntl
import re
import time
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Iterator

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from farm.errors import BadInput, BuildFailed

REPO_ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS_DIR = REPO_ROOT / "migrations"
#: The newest migration (tests/test_migrations.py checks it is Alembic's head).
SCHEMA_HEAD = "0013"
_MIGRATE_LOCK_KEY = 0x6661726D  # "farm": the advisory lock every migrating process takes
_TRANSIENT = re.compile(
    r"connection refused|could not connect|server closed the connection|terminating connection|"
    r"the database system is (?:starting up|shutting down|in recovery mode)|database is locked|"
    r"connection reset|timeout expired|no route to host|connection timed out",
    re.IGNORECASE,
)


class LineageUnavailable(BuildFailed):
    """The lineage database cannot be reached or used (after retrying transient failures)."""


def _shown(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL that does not parse is shown as given
        return url


def is_transient(exc: BaseException) -> bool:
    return bool(_TRANSIENT.search(str(exc)))


def unavailable(url: str, exc: BaseException) -> LineageUnavailable:
    first = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [""])[0]
    if "does not exist" in first:
        hint = "create it (createdb) or fix FARM_DATABASE_URL"
    elif is_transient(exc):
        hint = "is the server running? (retried; FARM_DB_RETRY_SECONDS sets for how long)"
    else:
        hint = "check FARM_DATABASE_URL"
    return LineageUnavailable(f"lineage database {_shown(url)} is unavailable: {first}: {hint}")


def make_engine(url: str, retry_seconds: float = 30.0, **options: object) -> Engine:
    if url.startswith("sqlite:///"):
        parent = Path(url.removeprefix("sqlite:///")).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"cannot create the folder of the lineage DB {url.removeprefix('sqlite:///')}: "
                           f"{exc.strerror or exc} (is FARM_HOME a folder you can write?)") from None
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")  # concurrent readers while a build writes
            cur.close()
    else:
        try:
            engine = create_engine(url, pool_pre_ping=True, **options)
        except Exception as exc:  # noqa: BLE001 - e.g. a malformed URL or a missing driver
            raise BadInput(f"cannot use database URL {_shown(url)!r}: {exc}; check FARM_DATABASE_URL") from exc

    @event.listens_for(engine, "do_connect")
    def _connect_with_retries(dialect, _conn_rec, cargs, cparams):  # noqa: ANN001
        deadline = time.monotonic() + retry_seconds
        delay = 0.25
        while True:
            try:
                return dialect.dbapi.connect(*cargs, **cparams)
            except Exception as exc:  # noqa: BLE001 - the DBAPI's own OperationalError
                if not is_transient(exc) or time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 4.0)

    return engine


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def schema_revision(engine: Engine) -> str | None:
    """The database's Alembic revision (None for an empty database)."""
    with engine.connect() as conn:
        try:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except DBAPIError as exc:
            if is_transient(exc):
                raise
            return None  # no alembic_version table yet


@contextmanager
def _migration_lock(engine: Engine, url: str) -> Iterator[None]:
    """One migrating process at a time, across processes and hosts."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATE_LOCK_KEY})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATE_LOCK_KEY})
                conn.commit()
        return
    path = Path(url.removeprefix("sqlite:///") + ".migrate-lock")
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def upgrade(url: str) -> None:
    """Bring the database to the newest schema (idempotent, serialized across processes)."""
    from alembic import command

    engine = make_engine(url)
    try:
        with _migration_lock(engine, url):
            if schema_revision(engine) != SCHEMA_HEAD:  # another process may have done it meanwhile
                command.upgrade(alembic_config(url), "head")
    except OperationalError as exc:
        raise unavailable(url, exc) from None
    finally:
        engine.dispose()


class Database:
    def __init__(self, url: str, migrate: bool = True, retry_seconds: float = 30.0):
        # retry_seconds: settings.db_retry_seconds (FARM_DB_RETRY_SECONDS), through Resources.
        self.url = url
        self.retry_seconds = retry_seconds
        self.engine = make_engine(url, retry_seconds)
        if migrate:
            _ensure_schema(url, self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        _count_changes(self._sessions)

    @contextmanager
    def session(self) -> Iterator[Session]:
        try:
            with self._sessions() as s:
                try:
                    yield s
                    s.commit()
                except BaseException:
                    s.rollback()
                    raise
        except OperationalError as exc:
            raise unavailable(self.url, exc) from None


    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reads only (`farm api`). On PostgreSQL its connection is in autocommit: no
        BEGIN and COMMIT round trips around the ~14 statements of a lookup (each statement sees the
        newest commit, as under the READ COMMITTED transaction a session would open: no consistency
        is lost). On SQLite, a plain session (one snapshot, no round trips to save). Never write
        through it: nothing would move the lineage generation."""
        if self.engine.dialect.name != "postgresql":
            with self.session() as s:
                yield s
            return
        try:
            with Session(self._autocommit, expire_on_commit=False) as s:
                yield s
        except OperationalError as exc:
            raise unavailable(self.url, exc) from None

    @cached_property
    def _autocommit(self) -> Engine:
        # Its own pool of autocommit connections: an execution option on the shared engine set and
        # reset the isolation level on every checkout (two more round trips; measured slower).
        return make_engine(self.url, self.retry_seconds, isolation_level="AUTOCOMMIT")


#: Tables whose rows no lineage answer shows: a write to them does not move the generation
#: (a build takes and drops leases all the time; the counter itself).
_UNSEEN = frozenset({"leases", "lineage_generation"})


def _count_changes(sessions: sessionmaker) -> None:
    """Every transaction that writes a row lineage shows bumps `lineage_generation.n` just before
    it commits, in the same transaction: a reader that sees n unchanged knows no such write
    committed since (an answer cached at n still holds). ORM flushes and Core DML executed through
    the session both count; the bump is the transaction's last statement, so the row lock it takes
    on PostgreSQL is held only for the commit."""
    from sqlalchemy import update

    from farm.lineage.models import LineageGeneration

    def dml(state) -> None:  # noqa: ANN001 - ORMExecuteState
        if state.is_insert or state.is_update or state.is_delete:
            table = getattr(state.statement, "table", None)
            if getattr(table, "name", None) not in _UNSEEN:
                state.session.info["lineage_changed"] = True

    def flushed(session: Session, _ctx) -> None:  # noqa: ANN001
        if any(getattr(o, "__tablename__", None) not in _UNSEEN
               for o in (*session.new, *session.dirty, *session.deleted)):
            session.info["lineage_changed"] = True

    def committing(session: Session) -> None:
        session.flush()  # objects added since the last flush count too
        if session.info.pop("lineage_changed", False):
            session.execute(update(LineageGeneration).where(LineageGeneration.id == 1)
                            .values(n=LineageGeneration.n + 1))

    event.listen(sessions, "do_orm_execute", dml)
    event.listen(sessions, "after_flush", flushed)
    event.listen(sessions, "before_commit", committing)


def _ensure_schema(url: str, engine: Engine) -> None:
    """A cheap check per process (one SELECT); the migration only when the database is behind."""
    if url in _SCHEMA_OK:
        return
    try:
        current = schema_revision(engine)
    except OperationalError as exc:
        raise unavailable(url, exc) from None
    if current is not None and current > SCHEMA_HEAD:
        raise BadInput(f"lineage database {_shown(url)} is at schema {current}, newer than this farm's "
                       f"{SCHEMA_HEAD}: update the farm")
    if current != SCHEMA_HEAD:
        upgrade(url)
    _SCHEMA_OK.add(url)


_SCHEMA_OK: set[str] = set()
