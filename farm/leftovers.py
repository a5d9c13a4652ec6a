"""Crash hygiene: what a killed farm process leaves behind is found and removed by the next one.

Scratch folders (FARM_HOME/work), store temp files (the local store's tmp/) and half-made generated
sources (FARM_CACHE/sources/*/*.tmp-*) carry their owner's host and pid in their name
(`owner_tag()`). `sweep` removes those whose owner, on this host, is no longer alive — never one a
running build still uses, however old — and entries without an owner tag (made before it existed)
once they are a day old. A build and a gate suite sweep when they start.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import socket
import time
from pathlib import Path

log = logging.getLogger(__name__)
_TAG = re.compile(r"(?:^|[-.])([A-Za-z0-9_]+)\.(\d+)(?:-|$)")
_LEGACY_AGE_S = 24 * 3600


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def owner_tag() -> str:
    """`<host>.<pid>`: who made a temporary file or folder."""
    return f"{_host()}.{os.getpid()}"


_NONCE = secrets.token_hex(4)


def process_tag() -> str:
    """`<host>.<pid>-<nonce>`: this process, unique where pids and hostnames repeat (a recreated
    container's pid 1): the holder of a lease, the owner of a flow run."""
    return f"{owner_tag()}-{_NONCE}"


def split_tag(tag: str) -> tuple[str, int | None]:
    """(host, pid) of an owner or process tag (pid None where it names none)."""
    host, _, rest = tag.rpartition(".")
    pid = rest.split("-", 1)[0]
    return host, int(pid) if pid.isdigit() else None


def gone_here(tag: str) -> bool:
    """Whether the process `tag` names ran on this host and its pid is gone (not this process)."""
    host, pid = split_tag(tag)
    return host == _host() and pid is not None and pid != os.getpid() and not pid_alive(pid)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_gone(name: str, mtime: float) -> bool:
    m = _TAG.search(name)
    if m is None:
        return time.time() - mtime > _LEGACY_AGE_S
    host, pid = m.group(1), int(m.group(2))
    return host == _host() and pid != os.getpid() and not pid_alive(pid)


def sweep(folders: list[tuple[Path, str]]) -> list[str]:
    """Remove the entries of each (folder, name marker) whose name has the marker and whose owner
    process is gone; what was removed. The marker keeps finished entries (a cached generated source
    beside a half-made one) out of reach."""
    removed = []
    for folder, marker in folders:
        try:
            entries = [e for e in os.scandir(folder) if marker in e.name]
        except OSError:
            continue
        for entry in entries:
            try:
                if not _owner_gone(entry.name, entry.stat(follow_symlinks=False).st_mtime):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
            except OSError:
                continue
    if removed:
        log.info("removed %d leftover(s) of processes that are gone: %s", len(removed), ", ".join(removed[:5]))
    return removed


def sweep_farm(res) -> list[str]:
    """A farm's leftovers: scratch folders, local-store temp files, half-made generated sources."""
    sources = res.settings.cache / "sources"
    folders = [(res.settings.work_dir, ""), (sources / "generated", ".tmp-"), (sources / "gguf", ".tmp-")]
    tmp = getattr(res.store, "_tmp", None)
    if tmp is not None:
        folders.append((Path(tmp), ""))
    return sweep(folders)
