"""The read-only lineage HTTP API (farm/api.py) on SQLite and the real PostgreSQL: the same JSON as
`farm lineage --json`, the section and model listings, the card route, and bad inputs (malformed
sha, too short, unknown, ambiguous, injection attempts, writes)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from types import SimpleNamespace

import httpx
import pytest
from fastapi.testclient import TestClient

from farm.api import make_app
from farm.lineage.db import Database
from farm.lineage.record import record_artifact, record_recipe, record_sections
from farm.store.local import LocalStore


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(params=["sqlite", "postgresql"])
def farm(request, tmp_path):
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    else:
        db = Database(request.getfixturevalue("pg_url"))
        with db.engine.begin() as c:
            for table in ("tune_searches", "leases", "artifact_locations", "device_results", "gate_results", "rechecks", "stage_cache",
                          "sections", "artifact_inputs", "artifacts", "recipes", "sources", "toolchains"):
                c.exec_driver_sql(f"DELETE FROM {table}")
    store = LocalStore(tmp_path / "store")
    res = SimpleNamespace(db=db, store=store)
    with db.session() as s:
        rd = record_recipe(s, h("recipe"), "r8", {"name": "r8"}, [])
        for i, (tag, tflite) in enumerate([("a", "q1"), ("b", "q1"), ("c", "q2")]):
            record_artifact(s, sha256=h(f"bundle-{tag}"), kind="litertlm", size=10, uri="file:///b",
                            name="tiny_r8.litertlm", chain="tiny/r8", model_id="tiny", recipe_digest=rd)
            s.flush()
            record_sections(s, h(f"bundle-{tag}"), [
                {"index": 0, "type": "TFLiteModel", "offset": 16384, "size": 4, "sha256": h(tflite)}])
        record_artifact(s, sha256=h("other"), kind="litertlm", size=10, uri="file:///o", name="other_r8.litertlm",
                        chain="tiny-2/r8", model_id="tiny-2")
    card = tmp_path / "card.json"
    card.write_text(json.dumps({"schema_version": "1.2", "model": {"id": "tiny"}}))
    ref = store.put_file(card)
    with db.session() as s:
        record_artifact(s, sha256=ref.sha256, kind="card", size=ref.size, uri=ref.uri, name="tiny.card.json",
                        chain="card/tiny", model_id="tiny",
                        details={"model_id": "tiny", "markdown_sha256": h("md"), "describes": [h("bundle-c")]})
    return res, TestClient(make_app(res))


def test_lookup_by_sha_and_prefix_is_the_lineage_record(farm):
    res, client = farm
    full = h("bundle-c")
    r = client.get(f"/artifacts/{full}")
    assert r.status_code == 200
    body = r.json()
    assert body["sha256"] == full and body["previous"]["sha256"] == h("bundle-b")
    assert body["chain"] == {"chain": "tiny/r8", "seq": 3}
    assert client.get(f"/artifacts/{full[:10].upper()}").json()["sha256"] == full
    from farm.lineage.report import lineage_record

    assert body == json.loads(json.dumps(lineage_record(res, full), default=str))  # the CLI's JSON


def test_bad_lookups_have_their_status(farm):
    _res, client = farm
    for bad in ("abc", "xyz123", "%27%3B%20DROP%20TABLE%20artifacts%3B--", "a" * 65, "0x1234"):
        r = client.get(f"/artifacts/{bad}")
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"] == "bad_sha256"
    assert client.get("/artifacts/" + "0" * 64).status_code == 404
    # An ambiguous prefix built on purpose: two artifacts recorded with one prefix.
    with _res.db.session() as s:
        record_artifact(s, sha256="abcd" + "0" * 60, kind="tokenizer", size=1, uri="file:///t")
        record_artifact(s, sha256="abcd" + "1" * 60, kind="tokenizer", size=1, uri="file:///t")
    r = client.get("/artifacts/abcd")
    assert r.status_code == 409 and sorted(r.json()["candidates"]) == ["abcd" + "0" * 60, "abcd" + "1" * 60]
    # The table is still there, and nothing can be written.
    assert client.get(f"/artifacts/{h('bundle-a')}").status_code == 200
    for method in ("post", "put", "delete", "patch"):
        assert getattr(client, method)(f"/artifacts/{h('bundle-a')}").status_code == 405


def test_listing_by_model_recipe_and_kind(farm):
    _res, client = farm
    tiny = client.get("/artifacts", params={"model": "tiny"}).json()["artifacts"]
    assert {a["sha256"] for a in tiny} >= {h("bundle-a"), h("bundle-b"), h("bundle-c")}
    assert h("other") not in {a["sha256"] for a in tiny}  # "tiny-2" is another model, not a prefix match
    by_recipe = client.get("/artifacts", params={"recipe": "r8", "kind": "litertlm"}).json()["artifacts"]
    assert {a["sha256"] for a in by_recipe} == {h("bundle-a"), h("bundle-b"), h("bundle-c")}
    assert client.get("/artifacts", params={"model": "x' OR '1'='1"}).json()["artifacts"] == []
    assert client.get("/artifacts", params={"kind": "nope"}).status_code == 400
    assert client.get("/artifacts", params={"limit": 0}).status_code == 422


def test_section_carriers(farm):
    _res, client = farm
    r = client.get(f"/sections/{h('q1')}").json()
    assert [f["sha256"] for f in r["files"]] == sorted([h("bundle-a"), h("bundle-b")]) and r["more"] is False
    assert client.get(f"/sections/{h('q1')[:10]}").status_code == 400
    assert client.get(f"/sections/{h('nothing')}").status_code == 404


def test_card_route(farm):
    _res, client = farm
    r = client.get("/cards/TINY")
    assert r.status_code == 200
    body = r.json()
    assert body["card"]["schema_version"] == "1.2" and body["describes"] == [h("bundle-c")] and body["version"] == 1
    assert client.get("/cards/tiny-2").status_code == 404


def test_openapi_lists_only_reads(farm):
    _res, client = farm
    spec = client.get("/openapi.json").json()
    methods = {m for path in spec["paths"].values() for m in path}
    assert methods == {"get"}
    assert {"/artifacts/{ref}", "/artifacts", "/sections/{sha}", "/cards/{model}"} <= set(spec["paths"])


def test_farm_api_command_serves(tmp_path):
    """`farm api` as a user runs it: listens on loopback, answers, and a bad database URL is one line."""
    from farmtest import REPO, farm_env, free_port

    port = free_port()
    env = farm_env(tmp_path / "home")
    proc = subprocess.Popen([sys.executable, "-m", "farm_cli", "api", "--port", str(port)], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "api.log", "w"))
    try:
        for _ in range(100):
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert r.status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/artifacts/zz").status_code == 400
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bad = subprocess.run([sys.executable, "-m", "farm_cli", "api", "--port", str(port)], cwd=REPO, text=True,
                         capture_output=True, timeout=60,
                         env={**env, "FARM_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none",
                              "FARM_DB_RETRY_SECONDS": "0"})
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_answers_are_kept_until_lineage_changes_and_never_after(farm):
    """A repeated lookup is answered without the queries; a gate result recorded in between is in
    the next answer (the negative control: an answer kept past a write would miss it); a lease,
    which no answer shows, keeps the answers; ETag / If-None-Match answer 304 while nothing changed."""
    from datetime import datetime, timezone

    from sqlalchemy import event

    from farm.lineage.record import record_gate_result, release_lease, try_acquire_lease

    res, client = farm
    statements = []
    event.listen(res.db.engine, "before_cursor_execute", lambda *a: statements.append(1))
    sha = h("bundle-c")
    first = client.get(f"/artifacts/{sha}")
    assert first.status_code == 200 and first.json()["gates"] == []
    made = len(statements)
    again = client.get(f"/artifacts/{sha}")
    assert again.content == first.content and again.headers["etag"] == first.headers["etag"]
    assert len(statements) - made <= 2, "a kept answer reads the generation only"
    assert client.get(f"/artifacts/{sha}", headers={"If-None-Match": first.headers["etag"]}).status_code == 304

    with res.db.session() as s:  # a lease: nothing a lookup shows
        try_acquire_lease(s, h("lease"), "host.1", "bench")
    with res.db.session() as s:
        release_lease(s, h("lease"), "host.1")
    assert client.get(f"/artifacts/{sha}").headers["etag"] == first.headers["etag"]

    now = datetime.now(timezone.utc)
    with res.db.session() as s:
        record_gate_result(s, artifact_sha256=sha, gate="metadata", gate_version=1, kind="bundle", status="pass",
                           runtime="litert-lm", runtime_version="0.18.1", backend="cpu", device="test", metrics={},
                           evidence=[], findings=[], config={}, started_at=now, finished_at=now)
    after = client.get(f"/artifacts/{sha}")
    assert [g["gate"] for g in after.json()["gates"]] == ["metadata"]
    assert after.headers["etag"] != first.headers["etag"]
    assert client.get(f"/artifacts/{sha}", headers={"If-None-Match": first.headers["etag"]}).status_code == 200
    listing = client.get("/artifacts?limit=2")
    assert listing.status_code == 200 and len(listing.json()["artifacts"]) == 2


def test_kept_answers_are_bounded():
    from farm.api import Answers

    kept = Answers(max_bytes=800)
    assert kept.get("a", 1) is None
    for i in range(20):
        kept.put(f"k{i}", 1, b"x" * 100)
    assert kept.get("k19", 1) == b"x" * 100 and kept.get("k0", 1) is None  # oldest dropped
    assert kept.get("k19", 2) is None and kept.get("k18", 2) is None  # a new generation drops all
    kept.put("late", 1, b"y")  # made at a generation already gone: not kept
    assert kept.get("late", 2) is None
