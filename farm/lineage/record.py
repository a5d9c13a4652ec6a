"""Writes to the lineage DB. Callers store and verify the bytes first; every write here is an
idempotent insert keyed by content, so two identical builds racing each other leave one record."""

from __future__ import annotations

from typing import Any, Iterable

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from farm.results import DeviceRecord, GateRecord

from farm.lineage.models import (
    Artifact,
    ArtifactInput,
    Recipe,
    Section,
    Source,
    StageCache,
    StageFailure,
    Toolchain,
)


def insert_ignore(session: Session, model: type, **values: Any) -> bool:
    """INSERT … ON CONFLICT DO NOTHING; True if this call inserted the row."""
    dialect = session.get_bind().dialect.name
    insert = {"postgresql": pg_insert, "sqlite": sqlite_insert}.get(dialect)
    if insert is None:
        raise RuntimeError(f"lineage supports PostgreSQL and SQLite, not {dialect}")
    # RETURNING, not rowcount: psycopg reports rowcount -1 here (measured: a conflicting insert
    # "succeeded"), which made two processes both believe they held one lease.
    pk = list(model.__table__.primary_key.columns)[0]
    result = session.execute(insert(model).values(**values).on_conflict_do_nothing().returning(pk))
    return result.first() is not None


def record_toolchain(session: Session, versions: dict[str, Any]) -> str:
    insert_ignore(
        session,
        Toolchain,
        id=versions["freeze_sha256"],
        python_version=versions["python"],
        packages=versions["packages"],
        freeze=versions["freeze"],
    )
    return versions["freeze_sha256"]


def this_host() -> str:
    """The host a record names (the hostname, as gate and device results name theirs)."""
    import socket

    return socket.gethostname()


def record_source(session: Session, **values: Any) -> str:
    values.setdefault("host", this_host())
    insert_ignore(session, Source, **values)
    return values["id"]


def record_recipe(session: Session, digest: str, name: str, body: dict, rendered: list) -> str:
    insert_ignore(session, Recipe, digest=digest, name=name, body=body, rendered=rendered)
    return digest


def record_stored(session: Session, ref: Any, kind: str, **values: Any) -> bool:
    """record_artifact for an object just put in the store: `ref` is what the store answered (its
    sha256, size and uri: farm.store.ObjectRef)."""
    return record_artifact(session, sha256=ref.sha256, kind=kind, size=ref.size, uri=ref.uri, **values)


def record_artifact(
    session: Session,
    *,
    sha256: str,
    kind: str,
    size: int,
    uri: str,
    inputs: dict[str, str] | None = None,
    name: str | None = None,
    chain: str | None = None,
    model_id: str | None = None,
    **values: Any,
) -> bool:
    """Insert an artifact (and its parent edges). With a `chain` (a model id and variant, e.g.
    "tiny-qwen35/qwen35_wi8_float_gates", or "card/<model id>"), a new file becomes the chain's
    newest version: it `supersedes` the chain's head and takes the next `chain_seq`. (chain,
    chain_seq) is unique, so two builds racing cannot both supersede one file (a fork): the loser
    sees its insert refused, re-reads the head and supersedes the winner instead. A file without a
    chain (an import) supersedes nothing, whatever its name, and no farm file supersedes it."""
    if chain is None:
        inserted = _insert_artifact(session, sha256=sha256, kind=kind, size=size, uri=uri, name=name,
                                    supersedes_sha256=None, chain=None, chain_seq=None, model_id=model_id, **values)
    else:
        for _attempt in range(20):
            if session.get(Artifact, sha256) is not None:
                inserted = False  # the same bytes again: already a version of some chain
                break
            head = session.execute(
                select(Artifact.sha256, Artifact.chain_seq).where(Artifact.chain == chain)
                .order_by(Artifact.chain_seq.desc()).limit(1)
            ).first()
            inserted = _insert_artifact(
                session, sha256=sha256, kind=kind, size=size, uri=uri, name=name,
                supersedes_sha256=head[0] if head else None, chain=chain, model_id=model_id,
                chain_seq=(head[1] + 1) if head else 1, **dict(values))
            if inserted:
                break
        else:
            raise RuntimeError(f"could not append {sha256[:12]} to the version chain {chain!r}: 20 concurrent writers won")
    for role, parent in (inputs or {}).items():
        insert_ignore(session, ArtifactInput, artifact_sha256=sha256, role=role, input_sha256=parent)
    record_location(session, sha256, uri)
    return inserted


def _insert_artifact(session: Session, **values: Any) -> bool:
    values.setdefault("details", {})
    values["details"] = values["details"] or {}
    values.setdefault("imported", False)
    values.setdefault("host", this_host())
    return insert_ignore(session, Artifact, **values)


def record_location(session: Session, sha256: str, uri: str) -> None:
    """The store an object's bytes are in (its URL is the object URI up to /sha256/)."""
    from farm.lineage.models import ArtifactLocation, utcnow

    store_url = uri.rsplit("/sha256/", 1)[0] if "/sha256/" in uri else uri
    insert_ignore(session, ArtifactLocation, artifact_sha256=sha256, store_url=store_url, uri=uri,
                  recorded_at=utcnow())


def record_sections(session: Session, artifact_sha256: str, sections: Iterable[dict]) -> None:
    for s in sections:
        insert_ignore(
            session,
            Section,
            artifact_sha256=artifact_sha256,
            idx=s["index"],
            type=s["type"],
            offset=s["offset"],
            size=s["size"],
            sha256=s["sha256"],
        )


def record_cache(session: Session, stage: str, cache_key: str, output_sha256: str, seconds: float) -> None:
    insert_ignore(
        session, StageCache, stage=stage, cache_key=cache_key, output_sha256=output_sha256, seconds=seconds
    )


def forget_cache_outputs(session: Session, shas: Iterable[str]) -> int:
    """Drop the stage-cache rows whose output is one of `shas` (gone from the store), so the next
    build runs those stages again instead of finding a hit to refuse; how many rows."""
    from sqlalchemy import delete

    shas = list(shas)
    if not shas:
        return 0
    return session.execute(delete(StageCache).where(StageCache.output_sha256.in_(shas))).rowcount


def lookup_cache(session: Session, stage: str, cache_key: str) -> str | None:
    row = session.get(StageCache, (stage, cache_key))
    return row.output_sha256 if row else None


def record_gate_result(session: Session, record: GateRecord | None = None, **values: Any) -> int:
    """Gate results are events, not content: each run is its own row (same gate, same file, another
    runtime version or another day is another measurement). The row is the record's fields
    (farm/results.py GateRecord; keyword values are validated as one)."""
    from farm.lineage.models import GateResult

    row = GateResult(**(record or GateRecord(**values)).row())
    session.add(row)
    session.flush()
    return row.id


def record_recheck(session: Session, **values: Any) -> int:
    from farm.lineage.models import Recheck

    row = Recheck(**values)
    session.add(row)
    session.flush()
    return row.id


def record_recheck_runs(session: Session, recheck_id: int, flow_run_ids: list[str]) -> None:
    """The flow runs a re-check started, one per sibling."""
    from farm.lineage.models import Recheck

    session.get(Recheck, recheck_id).flow_run_ids = list(flow_run_ids)


def record_device_result(session: Session, record: DeviceRecord | None = None, **values: Any) -> int:
    """A benchmark run is an event: each run on a device is its own row: the record's fields
    (farm/results.py DeviceRecord; keyword values are validated as one)."""
    from farm.lineage.models import DeviceResult

    row = DeviceResult(**(record or DeviceRecord(**values)).row())
    session.add(row)
    session.flush()
    return row.id


def try_acquire_lease(session: Session, key: str, holder: str, purpose: str) -> bool:
    """Insert the lease row; True if this call now holds it (atomic on both databases)."""
    from sqlalchemy import func

    from farm.lineage.models import Lease, utcnow

    return insert_ignore(session, Lease, key=key, holder=holder, purpose=purpose[:300], acquired_at=utcnow(),
                         heartbeat_at=func.now())


def _silent_seconds(session: Session):
    """Seconds since a lease's last heartbeat, by the database's clock (hosts' clocks may disagree)."""
    from sqlalchemy import func

    from farm.lineage.models import Lease

    last = func.coalesce(Lease.heartbeat_at, Lease.acquired_at)
    if session.get_bind().dialect.name == "postgresql":
        return func.extract("epoch", func.now() - last)
    return (func.julianday("now") - func.julianday(last)) * 86400.0


def lease_holder(session: Session, key: str) -> dict[str, Any] | None:
    """The lease's holder, purpose, acquired_at and `silent_s` (seconds since its last heartbeat)."""
    from sqlalchemy import select

    from farm.lineage.models import Lease

    row = session.execute(select(Lease.holder, Lease.purpose, Lease.acquired_at, _silent_seconds(session))
                          .where(Lease.key == key)).first()
    return None if row is None else {"holder": row[0], "purpose": row[1], "acquired_at": row[2],
                                     "silent_s": float(row[3] or 0.0)}


def renew_lease(session: Session, key: str, holder: str) -> bool:
    """The holder's heartbeat (the database's clock); False if `holder` no longer holds the lease."""
    from sqlalchemy import func, update

    from farm.lineage.models import Lease

    got = session.execute(update(Lease).where(Lease.key == key, Lease.holder == holder)
                          .values(heartbeat_at=func.now()).returning(Lease.key))
    return got.first() is not None


def release_lease(session: Session, key: str, holder: str) -> None:
    """Delete the lease if `holder` still holds it (a broken-and-retaken lease is someone else's)."""
    from sqlalchemy import delete

    from farm.lineage.models import Lease

    session.execute(delete(Lease).where(Lease.key == key, Lease.holder == holder))


def record_stage_failure(session: Session, **values: Any) -> int:
    """A build stopped in a stage (farm/pipeline.py record_failure)."""
    row = StageFailure(**values)
    session.add(row)
    session.flush()
    return row.id


def record_quality_measurement(session: Session, **values: Any) -> None:
    """A sensitivity sweep or a candidate's measurement, keyed by what was measured (`measure_key`):
    the same float export, text, treatment and toolchain is recorded once."""
    from farm.lineage.models import QualityMeasurement, utcnow

    values.setdefault("created_at", utcnow())
    insert_ignore(session, QualityMeasurement, **values)


def start_tune_search(session: Session, **values: Any) -> int:
    from farm.lineage.models import TuneSearch, utcnow

    row = TuneSearch(status="running", started_at=utcnow(), candidates=[], frontier=[], **values)
    session.add(row)
    session.flush()
    return row.id


def update_tune_search(session: Session, search_id: int, **values: Any) -> None:
    """A search's progress: each candidate as it is tried, then the outcome."""
    from farm.lineage.models import TuneSearch, utcnow

    row = session.get(TuneSearch, search_id)
    for k, v in values.items():
        setattr(row, k, v)
    if values.get("status") not in (None, "running"):
        row.finished_at = utcnow()
