"""hash: sha256 of the whole bundle and of each section, read from the file's own header."""

from __future__ import annotations

from farm.errors import StoreError
from farm.lineage.record import record_sections
from farm.litertlm import hash_sections
from farm.resources import Resources
from farm.stages.common import StageResult, cache_key, run_cached

READER_VERSION = 1  # bump when farm/litertlm.py reads headers differently


def hash_bundle(res: Resources, bundle: StageResult) -> StageResult:
    sha = bundle.artifact.sha256
    key = cache_key("hash", artifact=sha, reader=READER_VERSION)

    def compute() -> str:
        path = res.store.open_verified_path(sha)
        file_sha, _size, sections = hash_sections(path)
        if file_sha != sha:
            raise StoreError(f"bundle {sha[:12]} changed while hashing (read {file_sha[:12]})")
        with res.db.session() as s:
            record_sections(
                s,
                sha,
                [
                    {"index": sec.index, "type": sec.type, "offset": sec.offset, "size": sec.size, "sha256": digest}
                    for sec, digest in sections
                ],
            )
        return sha

    return run_cached(res, "hash", key, compute)
