"""The artifact store's contract: content-addressed objects named by the sha256 of their bytes.

Layout (both backends): ``sha256/<ab>/<cd>/<full sha>``, ab = first two hex characters of the
digest, cd = the next two. An object's address is a promise about its bytes, so every read
re-hashes what it hands out and refuses (StoreError) bytes that do not match.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterator, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from farm.errors import BadInput

#: Called with the number of bytes just transferred (for progress display).
Progress = Callable[[int], None]

_SHA256_RE = re.compile(r"[0-9a-f]{64}")


class ObjectRef(BaseModel):
    """A stored object: its digest (the address), where it lives, and its size in bytes."""

    model_config = ConfigDict(frozen=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    uri: str
    size: int = Field(ge=0)


def check_sha256(sha256: str) -> str:
    """The digest in canonical (lower-case) form; BadInput when it is not a sha256 hex digest."""
    sha = sha256.strip().lower() if isinstance(sha256, str) else ""
    if not _SHA256_RE.fullmatch(sha):
        raise BadInput(f"not a sha256 digest: {sha256!r} (expected 64 hex characters)")
    return sha


def object_key(sha256: str) -> str:
    """The object's key relative to the store root: ``sha256/ab/cd/<sha>``."""
    sha = check_sha256(sha256)
    return f"sha256/{sha[:2]}/{sha[2:4]}/{sha}"


@runtime_checkable
class Store(Protocol):
    """What the farm needs from an artifact store (LocalStore, S3Store)."""

    #: The store's own URL: ``file:///path`` or ``s3://bucket/prefix``.
    url: str

    def put_file(self, path: str | Path, *, progress: Progress | None = None) -> ObjectRef:
        """Store the file's bytes under their sha256 (streamed, bounded memory).

        Idempotent: when a sound object exists already nothing is written again and its ref is
        returned; an existing object that does not verify is replaced. Never leaves a partial
        object behind, whatever interrupts it.
        """
        ...

    def exists(self, sha256: str) -> bool: ...

    def uri(self, sha256: str) -> str:
        """Where the object lives (``file:///...`` or ``s3://...``), whether or not it exists."""
        ...

    def get_to_path(self, sha256: str, dest: str | Path) -> Path:
        """Copy the object to ``dest`` atomically, verifying its sha256 while streaming.

        On a mismatch raise StoreError and leave nothing at ``dest`` (an existing file there is
        left untouched).
        """
        ...

    def open_verified_path(self, sha256: str) -> Path:
        """A local path holding the object's verified bytes; treat it as read-only."""
        ...

    def delete(self, sha256: str) -> None:
        """Remove the object (tests and admin); no error when it is absent."""
        ...

    def verify(self, sha256: str, full: bool = False) -> str:
        """"ok", "missing" or "corrupt": cheap by default (a stat or a HEAD against what a full hash
        or the upload recorded), every byte hashed with `full`."""
        ...

    def quarantine(self, sha256: str) -> str | None:
        """Move a corrupt object aside (kept for the record); where it went, None if it was absent."""
        ...

    def list_objects(self) -> Iterator[str]:
        """The sha256 of every object the store holds."""
        ...
