"""The wire between the two environments, defined once: both sides import it from here.

The orchestrator (farm/toolchain.py) sends `{"command": ..., "request": {...}}` lines to
`python -m farm_toolchain serve`; the toolchain (farm_toolchain/protocol.py) answers one reply line
per request and ends the request's stderr with DONE_MARKER. A reply is `{"ok": true, ...the
command's fields}` or `{"ok": false, "error": "<one line>", "error_kind": "bad_input" | "failed"}`;
`Reply` reads it on the orchestrator's side, `ok_reply` / `error_reply` write it on the toolchain's.

A gate's verdict is one of STATUSES: what the toolchain's measurement may answer (MEASURED) plus
`could_not_run`, which only the orchestrator writes (the measurement raised, or the runtime ran on
another class than asked). FAILING is what fails a build; RANK orders a set of verdicts worst first.

Standard library only: farm/errors.py, a leaf every module imports, subclasses its BadInput, and
farm/litertlm.py must import without site-packages (tests/unit/farm/test_litertlm.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

DONE_MARKER = "\x1efarm-toolchain-request-done"

Status = Literal["pass", "warn", "fail", "could_not_run", "skipped"]
STATUSES: tuple[str, ...] = ("pass", "warn", "fail", "could_not_run", "skipped")
MEASURED: tuple[str, ...] = ("pass", "warn", "fail", "skipped")  # what a measurement itself answers
FAILING: tuple[str, ...] = ("fail", "could_not_run")
WORKS: tuple[str, ...] = ("pass", "warn")
RANK: dict[str, int] = {"fail": 0, "could_not_run": 1, "warn": 2, "pass": 3, "skipped": 4}  # worst first

ErrorKind = Literal["bad_input", "failed"]


class BadInput(Exception):
    """The request names something that does not exist or cannot be used: the caller's to fix (exit
    code 2 on either side; the orchestrator's farm.errors.BadInput is this one too)."""


def worst(statuses) -> str | None:
    """The worst of a set of verdicts (an unknown status counts as a failure), None for none."""
    found = list(statuses)
    return min(found, key=lambda s: RANK.get(s, 0)) if found else None


@dataclass(frozen=True)
class Reply:
    """One reply line as the orchestrator reads it: the envelope checked, the command's own fields
    kept as they came (`fields`)."""

    ok: bool
    error: str | None = None
    error_kind: ErrorKind | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, line: str | bytes) -> "Reply":
        """ValueError for a line that is not a reply (not JSON, no boolean `ok`, a failure without
        its one line or with a kind the wire does not know)."""
        obj = json.loads(line)
        if not isinstance(obj, dict) or not isinstance(obj.get("ok"), bool):
            raise ValueError("a reply is a JSON object with a boolean 'ok'")
        error, kind = obj.pop("error", None), obj.pop("error_kind", None)
        ok = obj.pop("ok")
        if not ok and (not isinstance(error, str) or kind not in get_args(ErrorKind)):
            raise ValueError(f"a failed reply carries its one line and a kind of {get_args(ErrorKind)}")
        return cls(ok=ok, error=error, error_kind=kind, fields=obj)


def ok_reply(fields: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, **fields}


def error_reply(error: str, kind: ErrorKind) -> dict[str, Any]:
    return {"ok": False, "error": error, "error_kind": kind}


def proc_status_bytes(field: str, pid: int | str = "self") -> int | None:
    """A `kB` field of /proc/<pid>/status in bytes (VmRSS, VmHWM), None where it cannot be read:
    the orchestrator polls a toolchain process's VmRSS, the toolchain reports its own VmHWM."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
