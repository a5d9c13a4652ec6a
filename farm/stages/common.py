"""What every stage shares: the result type, the content-keyed cache, and scratch directories."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator, Literal

from pydantic import BaseModel

from farm.digest import digest
from farm.leases import lease
from farm.leftovers import owner_tag
from farm.lineage.queries.artifacts import artifact_brief
from farm.lineage.record import lookup_cache, record_cache, record_location
from farm.resources import Resources

log = logging.getLogger(__name__)


class ArtifactRef(BaseModel):
    """What passes between stages: a reference, never the bytes."""

    sha256: str
    uri: str
    size: int
    kind: str


class StageResult(BaseModel):
    name: str
    status: Literal["ran", "cached"]
    seconds: float
    cache_key: str
    artifact: ArtifactRef


class NotRecorded(Exception):
    """Raised under `recorded_only()` where a stage would have to do work (farm/recorded.py)."""


_RECORDED_ONLY: ContextVar[bool] = ContextVar("recorded_only", default=False)


@contextmanager
def recorded_only() -> Iterator[None]:
    """Run stages only as far as lineage already holds their outputs: where one would work (make,
    download, store), `require_work` raises NotRecorded instead. How `farm build` finds that a
    build is a no-op without starting a flow run (farm/recorded.py)."""
    token = _RECORDED_ONLY.set(True)
    try:
        yield
    finally:
        _RECORDED_ONLY.reset(token)


def require_work(what: str) -> None:
    """Called before a stage does work: NotRecorded under `recorded_only()`, nothing otherwise."""
    if _RECORDED_ONLY.get():
        raise NotRecorded(what)


def cache_key(stage: str, **parts: object) -> str:
    return digest({"stage": stage, **parts})


def artifact_ref(res: Resources, sha: str) -> ArtifactRef:
    """The artifact where its bytes are now: in this farm's store (recorded as one of its
    locations), not wherever it was first stored."""
    with res.db.session() as s:
        a = artifact_brief(s, sha)
        uri = res.store.uri(sha)
        record_location(s, sha, uri)
        return ArtifactRef(sha256=sha, uri=uri, size=a["size"], kind=a["kind"])


def run_cached(res: Resources, stage: str, key: str, compute: Callable[[], str]) -> StageResult:
    """Return the recorded output for `key` if the store holds it intact, else run `compute`
    (which stores its output and records its lineage, returning the sha256) and remember it.
    A hit whose object vanished (a wiped bucket, a new store URL) is a miss; one whose object does
    not verify (store.verify: a stat against the last full hash on disk, the recorded checksum on
    S3) is moved aside to the store's quarantine and the stage runs again, putting sound bytes back.
    Identical concurrent builds run the stage once: the first takes the (stage, key) lease, the
    others wait and then find its output (farm/leases.py)."""
    started = time.monotonic()

    def cached() -> StageResult | None:
        with res.db.session() as s:
            hit = lookup_cache(s, stage, key)
        if hit is None:
            return None
        state = res.store.verify(hit)
        if state == "ok":
            return StageResult(
                name=stage, status="cached", seconds=round(time.monotonic() - started, 3),
                cache_key=key, artifact=artifact_ref(res, hit),
            )
        if state == "corrupt":
            where = res.store.quarantine(hit)
            log.warning("%s: cached output %s does not hash to its name; moved to %s, running the stage again",
                        stage, hit[:12], where)
        return None

    if (hit := cached()) is not None:
        return hit
    require_work(f"the {stage} stage")
    with lease(res, {"stage": stage, "key": key}, f"running the {stage} stage"):
        if (hit := cached()) is not None:  # made by the build we waited for
            return hit
        sha = compute()
        seconds = round(time.monotonic() - started, 3)
        with res.db.session() as s:
            record_cache(s, stage, key, sha, seconds)
    return StageResult(name=stage, status="ran", seconds=seconds, cache_key=key, artifact=artifact_ref(res, sha))


@contextmanager
def scratch_dir(res: Resources, stage: str) -> Iterator[Path]:
    """A private work folder under FARM_HOME/work, removed afterwards whatever happens."""
    res.settings.work_dir.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{stage}-{owner_tag()}-", dir=res.settings.work_dir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
