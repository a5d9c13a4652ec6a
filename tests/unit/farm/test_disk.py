"""A full disk, named (farm/disk.py): the failures that are a full disk become one line naming the
path and what is free; anything else is left alone (the negative controls); a floor that is not
there refuses before work."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from farm.disk import DiskFull, behind, free_bytes, named, require
from farm.errors import BuildFailed


@pytest.mark.parametrize("exc", [
    OSError(errno.ENOSPC, "No space left on device", "/data/x.tflite"),
    sqlite3.OperationalError("database or disk is full"),
    BuildFailed("toolchain export died: LLVM ERROR: IO failure on output stream: No space left on device"),
])
def test_a_full_disk_is_named_with_the_path_and_what_is_free(exc, tmp_path):
    out = named(exc, tmp_path)
    assert isinstance(out, DiskFull) and "the disk is full under" in str(out) and "free" in str(out)
    if isinstance(exc, OSError):
        assert "/data/x.tflite" in str(out)


@pytest.mark.parametrize("exc", [OSError(errno.EACCES, "Permission denied", "/x"), RuntimeError("boom"),
                                 sqlite3.OperationalError("database is locked")])
def test_negative_control_other_failures_are_not_called_a_full_disk(exc, tmp_path):
    assert named(exc, tmp_path) is None


def test_a_floor_that_is_not_free_refuses_with_both_figures(tmp_path):
    require(tmp_path / "not" / "yet", 1, "a command")  # the nearest existing parent's disk
    with pytest.raises(DiskFull, match=r"needs about .* free under .* and its disk has"):
        require(tmp_path, free_bytes(tmp_path) + 2**40, "a command")


def test_any_failure_on_a_disk_with_no_room_left_is_called_a_full_disk(tmp_path):
    # What a full FARM_HOME looked like: the Prefect server (its database on that disk) answered 500.
    exc = RuntimeError("Server error '500 Internal Server Error' for url 'http://127.0.0.1:8674/api/flow_runs/x/set_state'")
    full = behind(exc, tmp_path, nearly_full=free_bytes(tmp_path) + 1)
    assert isinstance(full, DiskFull) and "the disk is full under" in str(full) and "set_state" in str(full)
    # negative control: the same failure on a disk with room is left alone
    assert behind(exc, tmp_path, nearly_full=1) is None
    # and a failure that names the disk itself is named as before
    assert isinstance(behind(sqlite3.OperationalError("database or disk is full"), tmp_path, nearly_full=1), DiskFull)
