"""Lineage queries that run on every `farm revalidate` print nothing to the terminal: the release
list once compiled a column-level DISTINCT that SQLAlchemy warns about (an SAWarning on stderr)."""

from __future__ import annotations

import warnings

from farm.lineage.db import Database
from farm.lineage.queries.gates import recorded_runtime_versions


def test_the_recorded_runtime_releases_query_raises_no_sqlalchemy_warning(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with db.session() as s:
            assert recorded_runtime_versions(s) == []


def test_a_build_reuses_a_verified_device_result_of_the_same_bytes_protocol_and_runtime_only(tmp_path):
    """What a build's fan-out may reuse instead of benchmarking again (farm/devices/bench.py): the
    newest verified run of the same bytes, device, accelerator and protocol, on the same runtime
    release when the caller knows it; never a failed run (the negative controls)."""
    from datetime import datetime, timezone

    from farm.lineage.queries.devices import reusable_device_result
    from farm.lineage.record import record_artifact, record_device_result

    db = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    sha, proto = "ab" * 32, {"prefill_tokens": 32, "decode_tokens": 32}
    now = datetime(2026, 12, 4, tzinfo=timezone.utc)

    def run(status: str, runtime: str = "0.18.1", protocol: dict = proto) -> int:
        with db.session() as s:
            return record_device_result(s, artifact_sha256=sha, device_id="local-cpu", accelerator="cpu",
                                        status=status, failure_class=None if status == "verified" else "run_failed",
                                        prefill_tokens=32, decode_tokens=32, runs=3, cache_mode="no",
                                        runtime="litert-lm", runtime_version=runtime, env={}, evidence=[],
                                        protocol=protocol, started_at=now, finished_at=now)

    with db.session() as s:
        record_artifact(s, sha256=sha, kind="litertlm", size=1, uri="file:///x")
    with db.session() as s:
        assert reusable_device_result(s, sha, "local-cpu", "cpu", proto, "0.18.1") is None
    run("failed")
    with db.session() as s:
        assert reusable_device_result(s, sha, "local-cpu", "cpu", proto, "0.18.1") is None  # a failure is retried
    good = run("verified")
    run("verified", runtime="0.18.0")
    run("verified", protocol={"prefill_tokens": 128, "decode_tokens": 32})
    with db.session() as s:
        assert reusable_device_result(s, sha, "local-cpu", "cpu", proto, "0.18.1")["id"] == good
        assert reusable_device_result(s, sha, "local-cpu", "cpu", proto, "0.17.1") is None
        assert reusable_device_result(s, sha, "local-cpu", "gpu", proto, "0.18.1") is None
        assert reusable_device_result(s, sha, "pixel-8", "cpu", proto, None) is None
        assert reusable_device_result(s, sha, "local-cpu", "cpu", {"prefill_tokens": 1}, None) is None
