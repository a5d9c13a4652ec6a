"""Float exports shared by farms that share no lineage (FARM_EXPORT_CACHE; off by default).

A farm's convert stage is already made once per farm (its stage cache: lineage + store). Farms on
one machine with their own FARM_HOME (the test suite's homes, a user's experiments) share nothing,
so each ran litert-torch again on the same source with the same settings: the test suite made the
same 2 MB tiny export 17 times, ~50 s each on a 2-core machine. Here an export is kept under the
convert stage's own key (farm/stages/convert.py: the source's content digest, the family, the export
settings, the toolchain's identity) and replayed in place of the converter: the same files and the
same reply, the converter's own figures (seconds, peak memory) as it measured them.

Its files are checked against the sha256 recorded when they were kept; an entry that does not hash
is removed and the converter runs. `farm rebuild` never reads it (it re-runs the converter to
compare bytes). A replay is said in the float export's lineage details (`export_replayed`)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

REPLY = "reply.json"


def _sha256(path: Path) -> str:
    from farm.store import hash_file  # the store's own streaming hash

    return hash_file(path)[0]


def _files(reply: dict[str, Any]) -> dict[str, str]:
    """{name in the entry: path in the reply} of an export's files (the decoder and its parts)."""
    files = {"model.tflite": reply["tflite_path"]}
    for role, path in (reply.get("parts") or {}).items():
        files[f"part-{role}.tflite"] = path
    return files


def replay(cache: Path, key: str) -> dict[str, Any] | None:
    """The kept export's reply for `key` with its paths in the cache, or None (none kept, or one
    whose files do not hash as kept: removed, so the converter runs and keeps a sound one)."""
    entry = cache / key
    try:
        kept = json.loads((entry / REPLY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    reply = dict(kept["reply"])
    for name, sha in kept["sha256"].items():
        path = entry / name
        if not path.is_file() or _sha256(path) != sha:
            log.warning("export cache: %s of %s does not hash as kept; removing the entry", name, key[:12])
            shutil.rmtree(entry, ignore_errors=True)
            return None
    try:
        os.utime(entry / REPLY)  # last used: what prune() keeps longest
    except OSError:  # a read-only cache still replays
        pass
    reply["tflite_path"] = str(entry / "model.tflite")
    if reply.get("parts"):
        reply["parts"] = {role: str(entry / f"part-{role}.tflite") for role in reply["parts"]}
    return reply


def keep(cache: Path, key: str, reply: dict[str, Any]) -> None:
    """Keep an export the converter just made under `key`: its files copied, then its reply, into a
    private folder renamed into place (farms keeping the same key at once: the first one stays)."""
    entry = cache / key
    if (entry / REPLY).is_file():
        return
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=cache))
    try:
        sums = {}
        for name, path in _files(reply).items():
            shutil.copyfile(path, tmp / name)
            sums[name] = _sha256(tmp / name)
        (tmp / REPLY).write_text(json.dumps({"reply": reply, "sha256": sums}), encoding="utf-8")
        try:
            os.rename(tmp, entry)
        except OSError:  # another farm kept it first (the folder exists and is not empty)
            pass
    except OSError as e:  # a full or read-only cache costs the next farm an export, not this build
        log.warning("export cache: could not keep %s: %s", key[:12], e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def entry_bytes(entry: Path) -> int:
    """What one kept export takes on disk (its files and reply)."""
    return sum(f.stat().st_size for f in entry.iterdir())


def prune(cache: Path, max_bytes: int, stale_seconds: float = 3600.0) -> list[str]:
    """Keep a long-lived cache under `max_bytes`: the entries used longest ago go first (a replay
    marks an entry used), and so do folders a keeper left half-copied more than `stale_seconds` ago.
    The keys removed. The key holds the toolchain's identity (its code and package versions), so a
    changed toolchain leaves its old entries unused until they are pruned."""
    import time

    if not cache.is_dir():
        return []
    entries, now = [], time.time()
    for entry in cache.iterdir():
        if entry.name.startswith("."):
            if now - entry.stat().st_mtime > stale_seconds:
                shutil.rmtree(entry, ignore_errors=True)
            continue
        try:
            used = (entry / REPLY).stat().st_mtime
        except OSError:  # no reply: never a complete entry
            shutil.rmtree(entry, ignore_errors=True)
            continue
        entries.append((used, entry_bytes(entry), entry))
    removed, total = [], sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries, key=lambda e: e[0]):
        if total <= max_bytes:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        removed.append(entry.name)
    return removed
