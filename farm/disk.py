"""A full disk, named: the free space under a farm path, a floor checked before a command starts
Prefect (its database and the farm's logs live under FARM_HOME), room for a float export checked
before converting, and any failure that is a full disk (ENOSPC from the farm, SQLite's "database or
disk is full", a toolchain's "No space left on device") turned into one line that names the path,
what is free and what to do. Measured before (issue 19): on a FARM_HOME with 3 MB free, 8,351 lines
of Prefect's failing server start and a 3-minute timeout; 240 '--- Logging error ---' tracebacks."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from farm.errors import BuildFailed

# What a command needs under FARM_HOME before any model bytes: Prefect's SQLite database and its
# server's start, the lineage DB's growth, the logs (measured: a temporary server's first start
# writes ~8 MB; 64 MB leaves room for the tiny model's whole build).
FLOOR_BYTES = 64 * 2**20
# Less than this free under FARM_HOME when a command fails for a reason that does not say ENOSPC
# (the local Prefect server, its database on the same disk, answers 500): the disk is the cause.
NEARLY_FULL_BYTES = 2**20


class DiskFull(BuildFailed):
    """No space left where the farm writes: one line, exit 1."""


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem holding `path` (its nearest existing parent)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MB" if n < 10 * 2**30 else f"{n / 2**30:,.1f} GB"


def require(path: Path, need: int, what: str) -> None:
    """DiskFull unless `need` bytes are free under `path`."""
    free = free_bytes(path)
    if free < need:
        raise DiskFull(f"{what} needs about {_mb(need)} free under {path}, and its disk has {_mb(free)}: free "
                       "space there, or set FARM_HOME (or FARM_STORE_URL / FARM_CACHE) to a disk with room")


def named(exc: BaseException, where: Path) -> DiskFull | None:
    """The one-line DiskFull for a failure that is a full disk, else None."""
    text = str(exc)
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "database or disk is full" in text \
        or "No space left on device" in text
    if not full:
        return None
    path = Path(getattr(exc, "filename", None) or where)
    return DiskFull(f"the disk is full under {path} ({_mb(free_bytes(path))} free): {_first_line(exc)}; {_AGAIN}")


_AGAIN = ("free space there (or set FARM_HOME to a disk with room) and run the command again: what finished is "
          "recorded, nothing half-written is kept")


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    first = text.splitlines()[0] if text.strip() else type(exc).__name__
    if len(first) > 260:  # keep both ends: what failed, and the system's reason at the end
        first = f"{first[:140]} … {first[-110:]}"
    return first


def behind(exc: BaseException, where: Path, nearly_full: int = NEARLY_FULL_BYTES) -> DiskFull | None:
    """named(exc); or, for a failure that does not name the disk itself, a DiskFull when the disk
    under `where` is all but full at the moment of the failure (measured: a disk that filled
    mid-export ended in "unexpected PrefectHTTPStatusError: 500 ... set_state", the Prefect
    server's database being on it)."""
    if (full := named(exc, where)) is not None:
        return full
    try:
        free = free_bytes(where)
    except OSError:
        return None
    if free >= nearly_full:
        return None
    return DiskFull(f"the disk is full under {where} ({_mb(free)} free), which is what made this fail: "
                    f"{type(exc).__name__}: {_first_line(exc)}; {_AGAIN}")
