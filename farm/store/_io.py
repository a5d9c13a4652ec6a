"""Streaming hash/copy and atomic temp files shared by the store backends."""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import uuid
from pathlib import Path
from typing import Any

from farm.store.base import Progress

CHUNK_SIZE = 1 << 20  # 1 MiB
#: Buffers in flight between the reader thread and the hasher/writer: memory is
#: PIPELINE_DEPTH * CHUNK_SIZE, whatever the file size.
PIPELINE_DEPTH = 4

_EOF = object()


def _fill(src: Any, buf: bytearray) -> int:
    """Read up to len(buf) bytes into buf; 0 only at end of stream."""
    readinto = getattr(src, "readinto", None)
    if readinto is not None:
        n = readinto(buf)
        return 0 if n is None else n
    data = src.read(len(buf))  # e.g. botocore's StreamingBody (which checks Content-Length)
    n = len(data)
    buf[:n] = data
    return n


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def copy_and_hash(
    src: Any,
    dst_fd: int | None = None,
    progress: Progress | None = None,
    *,
    chunk_size: int = CHUNK_SIZE,
    threaded: bool = True,
) -> tuple[str, int]:
    """Stream ``src`` (anything with readinto() or read(n)) through sha256, writing the same
    bytes to ``dst_fd`` when given. Returns (hex digest, bytes).

    The digest is always of exactly the bytes written, even if the source changes underneath.
    With ``threaded``, a reader thread fills a small ring of reusable buffers, this thread hashes
    them and a writer thread writes them out, so reading, hashing and writing overlap (hashlib,
    readinto and os.write all release the GIL); memory stays at PIPELINE_DEPTH buffers whatever
    the size. Any exception, KeyboardInterrupt included, stops both threads before it propagates.
    """
    h = hashlib.sha256()
    total = 0
    if not threaded:
        buf = bytearray(chunk_size)
        view = memoryview(buf)
        while n := _fill(src, buf):
            h.update(view[:n])
            if dst_fd is not None:
                _write_all(dst_fd, view[:n])
            total += n
            if progress is not None:
                progress(n)
        return h.hexdigest(), total

    free: queue.Queue[bytearray | None] = queue.Queue()
    full: queue.Queue[Any] = queue.Queue()
    to_write: queue.Queue[Any] = queue.Queue()
    write_errors: list[BaseException] = []
    for _ in range(PIPELINE_DEPTH):
        free.put(bytearray(chunk_size))

    def reader() -> None:
        try:
            while (buf := free.get()) is not None:
                n = _fill(src, buf)
                full.put((buf, n) if n else _EOF)
                if not n:
                    return
        except BaseException as exc:  # handed to the consuming thread, which re-raises it
            full.put(exc)

    def writer() -> None:
        assert dst_fd is not None
        while (item := to_write.get()) is not None:
            buf, n = item
            if not write_errors:  # after an error, only recycle buffers until told to stop
                try:
                    with memoryview(buf) as view, view[:n] as data:
                        _write_all(dst_fd, data)
                except BaseException as exc:
                    write_errors.append(exc)
            free.put(buf)

    reading = threading.Thread(target=reader, name="farm-store-reader", daemon=True)
    writing = threading.Thread(target=writer, name="farm-store-writer", daemon=True)
    reading.start()
    if dst_fd is not None:
        writing.start()
    try:
        while (item := full.get()) is not _EOF:
            if isinstance(item, BaseException):
                raise item
            if write_errors:
                raise write_errors[0]
            buf, n = item
            with memoryview(buf) as view, view[:n] as data:
                h.update(data)
            if dst_fd is not None:
                to_write.put((buf, n))  # the writer recycles it once written
            else:
                free.put(buf)
            total += n
            if progress is not None:
                progress(n)
    finally:
        if dst_fd is not None:
            to_write.put(None)  # the writer drains what is queued (a few MiB) and stops
            writing.join()
        free.put(None)  # the reader stops at its next buffer request
        reading.join()
    if write_errors:
        raise write_errors[0]
    return h.hexdigest(), total


def hash_file(path: str | Path, progress: Progress | None = None) -> tuple[str, int]:
    """(sha256 hex digest, size) of a file, streamed."""
    with open(path, "rb", buffering=0) as f:
        _advise_sequential(f.fileno())
        return copy_and_hash(f, None, progress)


def _advise_sequential(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except OSError:
            pass


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class TempFile:
    """A new file that becomes ``final`` only through commit(); discard() removes every trace.

    Use as ``with TempFile(path) as tmp: ...; tmp.commit(final)``: leaving the block without a
    commit (any exception, KeyboardInterrupt included) deletes the temp file.
    """

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600
        )
        self._done = False

    @classmethod
    def beside(cls, dest: Path) -> TempFile:
        return cls(dest.parent / f".{dest.name}.{uuid.uuid4().hex}.part")

    @classmethod
    def in_dir(cls, directory: Path) -> TempFile:
        # The owner's host and pid in the name: the next farm process removes it if this one is
        # killed (farm/leftovers.py).
        from farm.leftovers import owner_tag

        return cls(directory / f"{owner_tag()}-{uuid.uuid4().hex}")

    def commit(self, final: Path, mode: int = 0o444) -> None:
        """fsync, set ``mode`` and rename onto ``final`` atomically (replacing what is there)."""
        assert self.fd is not None
        os.fsync(self.fd)
        os.fchmod(self.fd, mode)
        os.close(self.fd)
        self.fd = None
        os.replace(self.path, final)
        self._done = True
        fsync_dir(final.parent)

    def discard(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if not self._done:
            self._done = True
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> TempFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard()


class StatStamps:
    """What a full hash already proved, remembered by file stat: after an object hashed right, its
    (size, mtime_ns, ctime_ns, inode) is written to <dir>/<sha>; while the object's stat is the same,
    re-reading it to hash again proves nothing new. Any write to the file, or a utime to hide one,
    changes its ctime (which no user call can set), so a stale stamp never vouches for changed bytes.
    This is how a cache hit is verified for the cost of a stat (git's index does the same)."""

    def __init__(self, directory: Path):
        self.dir = directory

    @staticmethod
    def _stat_line(path: Path) -> str:
        st = path.stat()
        return f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}\n"

    def vouches(self, path: Path, sha: str) -> bool:
        try:
            return (self.dir / sha).read_text() == self._stat_line(path)
        except (OSError, ValueError):
            return False

    def record(self, path: Path, sha: str) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f".{sha}.{uuid.uuid4().hex}"
            tmp.write_text(self._stat_line(path))
            os.replace(tmp, self.dir / sha)
        except OSError:
            pass  # a stamp is an optimisation: without it the next check hashes

    def forget(self, sha: str) -> None:
        try:
            os.unlink(self.dir / sha)
        except OSError:
            pass
