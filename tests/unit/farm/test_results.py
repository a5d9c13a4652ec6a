"""farm/results.py: one record type per kind of result, from the measurement through lineage to its
readers. A record built from a toolchain answer is stored and read back as the same view; a record
that breaks the type (a status the wire does not know, a misspelt field, a missing measurement) is
refused before any row is written."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select

from farm.lineage.db import Database
from farm.lineage.models import DeviceResult, GateResult
from farm.lineage.queries.devices import device_results
from farm.lineage.queries.gates import gate_results
from farm.lineage.record import record_artifact, record_device_result, record_gate_result
from farm.results import DeviceRecord, GateRecord

SHA = hashlib.sha256(b"bundle").hexdigest()
NOW = datetime(2026, 12, 7, 16, 0, tzinfo=timezone.utc)
ON = {"host": "vm", "cpu_class": "x86_64:avx2", "cpu": {"label": "x86-64 AVX2", "how": "cpuid_mask"}}
ANSWER = {"status": "fail", "metrics": {"kl": 0.04}, "evidence": ["e"], "findings": ["f"],
          "runtime": {"package": "litert-lm-api", "version": "0.18.1"}, "backend": "cpu",
          "cpu": {"key": "x86_64:avx2"}, "replies": [{"case": "2 + 3", "reply": "Two and three"}], "peak_rss_bytes": 9}


@pytest.fixture
def db(tmp_path):
    database = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    with database.session() as s:
        record_artifact(s, sha256=SHA, kind="litertlm", size=1, uri="file:///b")
    return database


def _gate(**over) -> GateRecord:
    return GateRecord.from_answer({**ANSWER, **over.pop("answer", {})}, artifact_sha256=SHA, gate="questions",
                                  gate_version=2, kind="runtime", device="cpu-x86-avx2", **ON, config={"max_tokens": 8},
                                  started_at=NOW, finished_at=NOW, **over)


def test_a_gate_record_from_an_answer_is_stored_and_read_back_as_the_same_view(db):
    rec = _gate()
    assert (rec.runtime, rec.runtime_version, rec.replies) == ("litert-lm-api", "0.18.1", ANSWER["replies"])
    with db.session() as s:
        rid = record_gate_result(s, rec)
    with db.session() as s:
        [back] = gate_results(s, [SHA])
    assert back == rec.recorded(rid).view()
    assert back["started_at"] == "2026-12-07T16:00:00+00:00"  # UTC on every database (SQLite drops the zone)
    assert back["host"] == "vm" and back["cpu"]["label"] == "x86-64 AVX2"


def test_a_device_record_is_stored_and_read_back_as_the_same_view(db):
    rec = DeviceRecord(artifact_sha256=SHA, device_id="cpu-x86-avx2", accelerator="cpu", status="verified",
                       prefill_tokens=256, decode_tokens=256, runs=3, decode_tokens_per_s=23.5, **ON,
                       protocol={"runs": 3}, started_at=NOW, finished_at=NOW)
    with db.session() as s:
        rid = record_device_result(s, rec)
    with db.session() as s:
        [back] = device_results(s, SHA)
    assert back == rec.recorded(rid).view() and back["decode_tokens_per_s"] == 23.5


@pytest.mark.parametrize("make, field", [
    (lambda: _gate(answer={"status": "passed"}), "status"),  # not a status of the wire
    (lambda: _gate(cpu_clas="x86_64:avx2"), "cpu_clas"),  # a misspelt field is not dropped silently
    (lambda: GateRecord(artifact_sha256=SHA, gate="q", gate_version=1, kind="runtime", status="pass", runtime="r",
                        runtime_version="1", backend="cpu", started_at=NOW, finished_at=NOW), "device"),
    (lambda: DeviceRecord(artifact_sha256=SHA, device_id="d", accelerator="cpu", status="verified", decode_tokens=1,
                          runs=1, started_at=NOW, finished_at=NOW), "prefill_tokens"),
])
def test_a_record_that_breaks_its_type_is_refused_before_a_row_is_written(db, make, field):
    with pytest.raises(ValidationError) as exc:
        make()
    assert field in str(exc.value)
    with pytest.raises(ValidationError):  # the keyword form lineage's callers use is the same type
        with db.session() as s:
            record_gate_result(s, artifact_sha256=SHA, gate="q", gate_version=1, kind="runtime", status="passed",
                               runtime="r", runtime_version="1", backend="cpu", device="d", started_at=NOW,
                               finished_at=NOW)
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(GateResult)) == 0
        assert s.scalar(select(func.count()).select_from(DeviceResult)) == 0


def test_a_json_column_an_older_farm_left_null_reads_as_empty(db):
    with db.session() as s:
        rid = record_gate_result(s, _gate())
        s.get(GateResult, rid).metrics = None
    with db.session() as s:
        [back] = gate_results(s, [SHA])
    assert back["metrics"] == {} and back["evidence"] == ["e"]
