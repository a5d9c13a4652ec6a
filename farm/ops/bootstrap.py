"""Prefect set-up for every farm process that runs flows: the CLI, the local runner (flows/serve.py)
and workers. One place for the environment (state under FARM_HOME, a quiet closed network), which
server (farm/ops/server.py), the logging (farm/ops/console.py) and the log-record filter.

Prefect reads its settings from the process environment, so this is the one place the farm writes
Prefect variables, into the `environ` its entry point passes (`os.environ`, from the CLI's entry or
flows/serve.py): nothing here writes os.environ of its own accord."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, MutableMapping

from farm.errors import FarmError
from farm.settings import Settings


def prefect_env(settings: Settings, environ: MutableMapping[str, str]) -> None:
    """Before prefect is imported: its state under FARM_HOME (a fresh FARM_HOME never reuses another
    farm's Prefect records), no analytics, plain log lines (where the environment says nothing)."""
    environ.setdefault("PREFECT_HOME", str(settings.prefect_home))
    try:  # Prefect makes its home without parents: on a fresh FARM_HOME it warned on every first command
        Path(environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # FARM_HOME unusable (a file, a full disk): the disk check says so in one line
    environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    environ.setdefault("PREFECT_LOGGING_COLORS", "false")
    environ.setdefault("PREFECT_LOGGING_TO_API_BATCH_INTERVAL", "0.5")
    # Several farm commands starting at once on a 2-core machine start their temporary servers slowly
    # (measured: "Timed out while attempting to connect to ephemeral Prefect API server" at the 20 s
    # default with 4 concurrent builds).
    environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # Prefect's temporary server is `python -m uvicorn …` with uvicorn's defaults, which would take
    # uvloop and httptools (installed for `farm api`): asyncio and h11, as Prefect runs without them
    # (the farm's own server says so on its command line, farm/ops/prefect_app.py).
    environ.setdefault("UVICORN_LOOP", "asyncio")
    environ.setdefault("UVICORN_HTTP", "h11")


def prefect_api(settings: Settings, environ: MutableMapping[str, str], start_server: bool = True) -> str | None:
    """Everything before prefect is imported: room on FARM_HOME's disk, the environment, and the API
    (the farm's background server, started if needed, unless PREFECT_API_URL names another); its
    URL, or None for Prefect's temporary per-command server (FARM_PREFECT_SERVER=temporary)."""
    from farm.disk import FLOOR_BYTES, require

    # Before Prefect writes its database and starts a server under FARM_HOME: on a full disk that
    # was thousands of lines and a 3-minute timeout.
    require(settings.home, FLOOR_BYTES, "a farm command (Prefect's database, the lineage DB, the logs)")
    prefect_env(settings, environ)
    if start_server:
        from farm.ops.server import ensure_api

        return ensure_api(settings, environ)
    return environ.get("PREFECT_API_URL")


def setup_prefect(settings: Settings, environ: MutableMapping[str, str], live: bool = True, verbose: bool = False,
                  debug: bool = False, start_server: bool = True) -> Path:
    """The whole set-up, into the process environment `environ`; returns this process's log file."""
    from farm.ops.console import configure_logging, new_log_path

    prefect_api(settings, environ, start_server)
    import prefect  # noqa: F401

    log = new_log_path(settings.home)
    configure_logging(log, environ, verbose=verbose, live=live)
    if not debug:
        hide_tracebacks_of_expected_errors()
    return log


def hide_tracebacks_of_expected_errors() -> None:
    """Prefect logs a task's or flow's exception with its traceback; for the farm's own errors (bad
    input, a failed build, a store error) the one-line message is the whole story, so their log
    records are made without one (--debug keeps them). A record factory, not a handler filter:
    Prefect sets up its handlers only when the first run starts."""
    make = logging.getLogRecordFactory()
    if getattr(make, "_farm", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if record.exc_info and isinstance(record.exc_info[1], FarmError):
            record.exc_info = None
            record.exc_text = None
        return record

    factory._farm = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
