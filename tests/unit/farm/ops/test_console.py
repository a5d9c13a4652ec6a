"""The terminal's lines (farm/ops/console.py): one per finished event, none for a start, nothing else."""

import io
import logging

from farm.ops.console import EVENTS, LiveLines, emit, event_line, started


def test_one_line_per_finished_event_and_none_for_other_records():
    out = io.StringIO()
    handler = LiveLines(stream=out)
    EVENTS.addHandler(handler)
    try:
        started("stage", "convert")
        emit("stage", "convert", "ran", 41.2)
        emit("gate", "state_isolation", "warn", 3.0)
        emit("device", "local-cpu cpu", "verified", 2.0, "decode 3367.5 tok/s")
        logging.getLogger("farm.events").info("a plain record without an event")
    finally:
        EVENTS.removeHandler(handler)
        handler.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].split() == ["✓", "stage", "convert", "ran", "41.20s"]
    assert lines[1].split()[:4] == ["!", "gate", "state_isolation", "warn"]
    assert lines[2].endswith("decode 3367.5 tok/s")


def test_event_line_without_seconds():
    assert event_line({"kind": "card", "name": "m", "status": "not published", "seconds": None, "detail": "x"}) \
        .split() == ["✗", "card", "m", "not", "published", "x"]


def test_prefects_run_failure_records_stay_off_the_terminal_and_nothing_else_does():
    """The command reports a failed run itself, in one line: Prefect's ERROR records about the task
    or flow run are dropped from the console (kept in the log file); a farm warning or error, and
    a Prefect warning, still reach it."""
    from farm.ops.console import _no_run_failures

    def rec(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "Finished in state Failed(...)", None, None)

    assert not _no_run_failures(rec("prefect.task_runs", logging.ERROR))
    assert not _no_run_failures(rec("prefect.flow_runs", logging.CRITICAL))
    # Negative controls: what must still be shown.
    assert _no_run_failures(rec("prefect.task_runs", logging.WARNING))
    assert _no_run_failures(rec("prefect.server", logging.ERROR))
    assert _no_run_failures(rec("farm.flows", logging.ERROR))
