"""What a person sees in the terminal: one line per stage, gate, device and card (name, ran / cached /
reused, seconds, pass / warn / fail) and the result, instead of every line the toolchain writes.

The toolchain's output (export configuration dumps, transformers docstring complaints tagged
"[ERROR]", litert-torch's ASCII-art pyramid, NPU registry warnings) is logged at DEBUG: it goes to a
per-command log file under FARM_HOME/logs/ (its path is printed) and to the Prefect run's logs, and
`farm -v …` streams it to the terminal as well. Progress events travel on the `farm.events` logger
(`emit`), so tasks stay plain Prefect wrappers and the terminal is the CLI's business; a worker with
no terminal just logs them.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, MutableMapping

EVENTS = logging.getLogger("farm.events")
EVENTS.setLevel(logging.INFO)
_MARK = {"pass": "✓", "verified": "✓", "ran": "✓", "cached": "·", "reused": "·", "unchanged": "·", "published": "✓", "written": "✓", "committed": "✓", "dry run": "·",
         "warn": "!", "fail": "✗", "failed": "✗", "could_not_run": "✗", "does_not_fit": "✗",
         "not published": "✗", "skipped": "-"}


def emit(kind: str, name: str, status: str, seconds: float | None = None, detail: str = "") -> None:
    """One progress event: kind = stage | gate | device | card; status as recorded."""
    EVENTS.info("%s %s %s", kind, name, status,
                extra={"farm_event": {"kind": kind, "name": name, "status": status, "seconds": seconds,
                                      "detail": detail}})


def started(kind: str, name: str) -> None:
    EVENTS.info("%s %s started", kind, name, extra={"farm_event": {"kind": kind, "name": name, "status": "started"}})


def event_line(ev: dict[str, Any]) -> str:
    secs = f"{ev['seconds']:7.2f}s" if isinstance(ev.get("seconds"), (int, float)) else " " * 8
    detail = f"  {ev['detail']}" if ev.get("detail") else ""
    return f"  {_MARK.get(ev['status'], ' ')} {ev['kind']:<6} {ev['name']:<22} {ev['status']:<13} {secs}{detail}"


class LiveLines(logging.Handler):
    """Prints each finished event as a line; on a terminal a spinner names what is running."""

    def __init__(self, stream=None):
        super().__init__(logging.INFO)
        from rich.console import Console

        self.console = Console(file=stream or sys.stderr, highlight=False, soft_wrap=True)
        self.status = self.console.status("starting…") if self.console.is_terminal else None
        if self.status is not None:
            self.status.start()

    def emit(self, record: logging.LogRecord) -> None:
        ev = getattr(record, "farm_event", None)
        if ev is None:
            return
        if ev["status"] == "started":
            if self.status is not None:
                self.status.update(f"{ev['kind']} {ev['name']} …")
            return
        self.console.print(event_line(ev), markup=False)

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
        super().close()


def new_log_path(home: Path) -> Path:
    import tempfile

    name = f"farm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for folder in (home / "logs", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return folder / name
        except OSError:
            continue
    return Path(tempfile.gettempdir()) / name


# Prefect's background services talking to its API: the events websocket ("Unable to connect to
# ws://…"), the workers that send events and logs ("Service 'EventsWorker' failed to process item
# Event(…)", a whole event per line; "EventsWorker - Still processing items" at exit). When the server
# goes away mid-command they printed 24.6 KB of such lines before the command's own error (issue 19).
_SERVICE_LOGGERS = ("prefect.events", "prefect._internal.concurrency", "EventsWorker", "APILogWorker")


def _no_run_failures(record: logging.LogRecord) -> bool:
    """Keep off the terminal what the command reports itself or what is Prefect's plumbing, keeping
    it in the log file and the run's log in the UI: Prefect's ERROR records about a task or flow
    run ("Task run failed with exception", "Finished in state Failed", "Encountered exception during
    execution": three such lines came before the one line of a source refused inside the flow,
    tests/test_hub_source.py), and its API services' records (`_SERVICE_LOGGERS`)."""
    if record.name.startswith(_SERVICE_LOGGERS):
        return False
    return not (record.levelno >= logging.ERROR and record.name in ("prefect.task_runs", "prefect.flow_runs"))


def _terminal_handlers() -> list[logging.Handler]:
    """Every handler Prefect set up that writes to the terminal: the root's console handler and the
    stream handlers of loggers that do not propagate (prefect._internal, where its API services
    log; uvicorn, fastapi)."""
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger) and lg.handlers]
    return [h for lg in loggers for h in lg.handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]


def current_log() -> str | None:
    """The file this command logs to (configure_logging's), if it has one."""
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            return h.baseFilename
    return None


def configure_logging(log_path: Path, environ: MutableMapping[str, str], verbose: bool = False,
                      live: bool = True) -> LiveLines | None:
    """Before Prefect configures its logging (it does so lazily, when the first run context opens):
    its console handler shows warnings only (everything with -v); run loggers pass DEBUG on, so the
    toolchain's output reaches the Prefect run's logs; every record, DEBUG included, also goes to
    `log_path`; and progress events are printed as lines. Returns the live handler (close it).
    Prefect reads its logging settings from the process environment: `environ` (farm/ops/bootstrap.py)."""
    environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "DEBUG" if verbose else "WARNING")
    environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "DEBUG")
    environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "DEBUG")
    # prefect.main sets Prefect's logging up on import, every time (incrementally after a first
    # set-up): importing it now is the one set-up (calling setup_logging as well was a second,
    # 0.15 s), and the handlers below are not replaced when the first run starts.
    import prefect.main  # noqa: F401
    if not verbose:
        # A handler that cannot write (a full disk, a dead API) must not print a traceback per record
        # ("--- Logging error ---", Prefect's "--- Error logging to API ---": 240 lines on a full disk).
        logging.raiseExceptions = False
        for handler in _terminal_handlers():
            handler.addFilter(_no_run_failures)
    file_handler = logging.FileHandler(log_path, encoding="utf-8", delay=True)
    file_handler.setLevel(logging.DEBUG)
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logging.getLogger().addHandler(file_handler)
    # Prefect's API services log on prefect._internal, which does not propagate: into the file too.
    logging.getLogger("prefect._internal").addHandler(file_handler)
    if not live:
        return None
    lines = LiveLines()
    EVENTS.addHandler(lines)
    return lines
