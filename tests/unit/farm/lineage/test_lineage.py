"""Lineage records and queries on SQLite and on the real PostgreSQL."""

import hashlib
import threading

import pytest
from sqlalchemy import func, select

from farm.errors import BadInput
from farm.lineage.db import Database
from farm.lineage.models import Artifact, Section
from farm.lineage.queries.artifacts import lineage, resolve_sha
from farm.lineage.queries.sections import files_sharing_section, section_diff
from farm.lineage.record import record_artifact, record_recipe, record_sections, record_source, record_toolchain


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "sqlite":
        return Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    url = request.getfixturevalue("pg_url")
    database = Database(url)
    with database.engine.begin() as c:  # each test starts empty
        for table in ("tune_searches", "leases", "artifact_locations", "device_results", "gate_results", "rechecks", "stage_cache", "sections", "artifact_inputs", "artifacts", "recipes", "sources", "toolchains"):
            c.exec_driver_sql(f"DELETE FROM {table}")
    return database


def _seed(s, tag: str, tflite_bytes: str, tok_bytes: str = "tok", chain: str | None = "tiny/r", **extra) -> dict:
    tc = record_toolchain(s, {"freeze_sha256": h("freeze"), "python": "3.11.7", "packages": {"litert-torch": "0.10.0"}, "freeze": "x==1"})
    src = record_source(s, id=h("src"), kind="generated", name="tiny", family="qwen3_5", repo_id=None,
                        revision=None, path="/m", spec={"kind": "generated", "seed": 0},
                        files=[{"path": "tokenizer.json", "sha256": h(tok_bytes), "size": 3}], tokenizer_sha256=h(tok_bytes))
    rd = record_recipe(s, h("recipe"), "qwen35_wi8_float_gates", {"name": "r"}, [{"regex": ".*"}])
    record_artifact(s, sha256=h(tok_bytes), kind="tokenizer", size=3, uri="file:///t", source_id=src)
    record_artifact(s, sha256=h("float"), kind="float_tflite", size=100, uri="file:///f", source_id=src,
                    toolchain_id=tc, details={"export_config": {"cache_length": 64}, "converter": {"litert-torch": "0.10.0"}})
    record_artifact(s, sha256=h(tflite_bytes), kind="quantized_tflite", size=40, uri="file:///q", source_id=src,
                    toolchain_id=tc, recipe_digest=rd, inputs={"float_model": h("float")},
                    details={"exceptions": [{"name": "gdn", "regex": "x", "matched_ops": 8, "float32_ops": 8}]})
    bundle = h(f"bundle-{tag}")
    record_artifact(s, sha256=bundle, kind="litertlm", size=1000, uri="file:///b", name="tiny_r.litertlm",
                    chain=chain, model_id="tiny" if chain else None, source_id=src, toolchain_id=tc, recipe_digest=rd,
                    inputs={"model": h(tflite_bytes), "tokenizer": h(tok_bytes)}, **extra)
    s.flush()
    record_sections(s, bundle, [
        {"index": 0, "type": "LlmMetadataProto", "offset": 16384, "size": 10, "sha256": h("meta")},
        {"index": 1, "type": "HF_Tokenizer_Zlib", "offset": 32768, "size": 20, "sha256": h("ztok-" + tok_bytes)},
        {"index": 2, "type": "TFLiteModel", "offset": 49152, "size": 40, "sha256": h(tflite_bytes)},
    ])
    return {"bundle": bundle, "tflite": h(tflite_bytes)}


def test_full_lineage_walks_to_the_source(db):
    with db.session() as s:
        ids = _seed(s, "one", "q1")
    with db.session() as s:
        rec = lineage(s, ids["bundle"])
    assert rec["source"]["kind"] == "generated" and rec["source"]["family"] == "qwen3_5"
    assert rec["float_export"]["sha256"] == h("float")
    assert rec["float_export"]["converter"] == {"litert-torch": "0.10.0"}
    assert rec["recipe"]["name"] == "qwen35_wi8_float_gates"
    assert rec["recipe"]["exceptions"][0]["matched_ops"] == 8
    assert rec["tokenizer"]["sha256"] == h("tok")
    assert rec["toolchain"]["packages"]["litert-torch"] == "0.10.0"
    assert [s["type"] for s in rec["sections"]] == ["LlmMetadataProto", "HF_Tokenizer_Zlib", "TFLiteModel"]
    # The TFLite section is byte for byte the quantized model artifact.
    assert rec["sections"][2]["equals_artifact"]["kind"] == "quantized_tflite"
    assert rec["previous"] is None


def test_new_file_under_a_name_supersedes_and_diffs_sections(db):
    with db.session() as s:
        first = _seed(s, "one", "q1")
    with db.session() as s:
        second = _seed(s, "two", "q2", tok_bytes="tok")  # only the TFLite section changes
    with db.session() as s:
        rec = lineage(s, second["bundle"])
        first_rec = lineage(s, first["bundle"])
        shared = files_sharing_section(s, h("meta"))
    assert rec["previous"]["sha256"] == first["bundle"]
    status = {d["type"]: d["status"] for d in rec["previous"]["sections"]}
    assert status == {"LlmMetadataProto": "identical", "HF_Tokenizer_Zlib": "identical", "TFLiteModel": "changed"}
    assert first_rec["superseded_by"] == [second["bundle"]]
    assert sorted(shared) == sorted([first["bundle"], second["bundle"]])
    assert rec["sections"][0]["shared_with"] == [first["bundle"]]


def test_an_import_named_like_a_farm_file_supersedes_nothing(db):
    """The chain is the model id + variant, not the file name: an import of a file called
    tiny_r.litertlm neither supersedes the farm's file nor becomes the model's current file."""
    from farm.lineage.queries.cards import current_bundles

    with db.session() as s:
        farm_file = _seed(s, "one", "q1")
    with db.session() as s:
        imported = _seed(s, "imp", "q9", chain=None, imported=True)
    with db.session() as s:
        assert lineage(s, imported["bundle"])["previous"] is None
        assert lineage(s, farm_file["bundle"])["superseded_by"] == []
        assert current_bundles(s, "tiny") == [farm_file["bundle"]]
    with db.session() as s:
        second = _seed(s, "two", "q2")
    with db.session() as s:
        assert lineage(s, second["bundle"])["previous"]["sha256"] == farm_file["bundle"]
        assert lineage(s, second["bundle"])["chain"] == {"chain": "tiny/r", "seq": 2}
        assert current_bundles(s, "tiny") == [second["bundle"]]
        assert current_bundles(s, "tin") == []  # a range on the chain, not a name prefix


def test_concurrent_builds_cannot_fork_a_chain(db):
    """Eight writers append to one chain at once: the unique (chain, chain_seq) index refuses all
    but one per position, the losers re-read the head, so the chain stays a line (no file
    superseded twice) on both databases."""
    with db.session() as s:
        _seed(s, "base", "q0")
    errors = []

    def append(i):
        try:
            with db.session() as s:
                record_artifact(s, sha256=h(f"c{i}"), kind="litertlm", size=1, uri="file:///c", name="tiny_r.litertlm",
                                chain="tiny/r")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with db.session() as s:
        rows = s.execute(select(Artifact.chain_seq, Artifact.supersedes_sha256).where(Artifact.chain == "tiny/r")).all()
    if db.engine.dialect.name == "sqlite":
        # SQLite serializes writers; a writer whose snapshot went stale is refused ("database is
        # locked"), never forked: whatever landed is still a line.
        assert all("locked" in e for e in errors), errors
    else:
        assert errors == []
        assert len(rows) == 9
    seqs = sorted(r[0] for r in rows)
    assert seqs == list(range(1, len(rows) + 1))
    supersedes = [r[1] for r in rows if r[1] is not None]
    assert len(supersedes) == len(set(supersedes)) == len(rows) - 1


def test_prefix_resolution(db):
    with db.session() as s:
        ids = _seed(s, "one", "q1")
        full = ids["bundle"]
        assert resolve_sha(s, full) == full
        assert resolve_sha(s, full[:10].upper()) == full
        with pytest.raises(BadInput, match="no artifact"):
            resolve_sha(s, "0000000000")
        with pytest.raises(BadInput, match="not a sha256"):
            resolve_sha(s, "xyz!")


def test_ambiguous_prefix_lists_candidates(db):
    # Build two shas that share a 6-digit prefix (found by search), so ambiguity is certain.
    seen = {}
    i = 0
    while True:
        d = h(f"p{i}")
        if d[:5] in seen:
            a, b = seen[d[:5]], d
            break
        seen[d[:5]] = d
        i += 1
    with db.session() as s:
        for sha in (a, b):
            record_artifact(s, sha256=sha, kind="tokenizer", size=1, uri="file:///x")
    with db.session() as s:
        with pytest.raises(BadInput, match="ambiguous") as exc:
            resolve_sha(s, a[:5])
    assert a[:16] in str(exc.value) and b[:16] in str(exc.value)


def test_identical_records_race_to_one_row(db):
    """Two builds recording the same artifact at the same moment leave one row, no error."""
    sha = h("race")
    errors = []
    barrier = threading.Barrier(4)

    def worker():
        try:
            barrier.wait()
            with db.session() as s:
                record_artifact(s, sha256=sha, kind="tokenizer", size=1, uri="file:///x", inputs={})
                record_sections(s, sha, [{"index": 0, "type": "T", "offset": 0, "size": 1, "sha256": sha}])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(Artifact).where(Artifact.sha256 == sha)) == 1
        assert s.scalar(select(func.count()).select_from(Section).where(Section.artifact_sha256 == sha)) == 1


def test_section_diff_reports_added_and_removed():
    old = [{"type": "A", "sha256": "1", "size": 1}, {"type": "B", "sha256": "2", "size": 2}]
    new = [{"type": "A", "sha256": "1", "size": 1}, {"type": "C", "sha256": "3", "size": 3}]
    got = {d["type"]: d["status"] for d in section_diff(old, new)}
    assert got == {"A": "identical", "B": "removed", "C": "added"}


def _gate(s, sha: str, gate: str, status: str, kind: str = "parity", recheck_id=None, version="0.18.1") -> int:
    from datetime import datetime, timezone

    from farm.lineage.record import record_gate_result

    now = datetime.now(timezone.utc)
    return record_gate_result(
        s, artifact_sha256=sha, gate=gate, gate_version=1, kind=kind, status=status, runtime="litert-lm-api",
        runtime_version=version, backend="cpu", device="test", metrics={"pearson": 0.5}, evidence=["x"],
        findings=[], config={}, toolchain_id=None, flow_run_id=None, recheck_id=recheck_id, started_at=now, finished_at=now,
    )


def test_gate_results_siblings_and_rechecks_show_in_lineage(db):
    from farm.lineage.record import record_recheck

    with db.session() as s:
        a = _seed(s, "one", "q1")["bundle"]
    with db.session() as s:
        # Another model made with the same recipe is a sibling; a bundle under another name too.
        b = h("bundle-other-model")
        record_artifact(s, sha256=b, kind="litertlm", size=5, uri="file:///o", name="other_r.litertlm",
                        recipe_digest=h("recipe"))
        c = h("bundle-other-recipe")
        record_recipe(s, h("recipe2"), "other", {}, [])
        record_artifact(s, sha256=c, kind="litertlm", size=5, uri="file:///c", name="c.litertlm", recipe_digest=h("recipe2"))
    with db.session() as s:
        failed = _gate(s, a, "logits_parity", "fail")
        _gate(s, a, "tokenizer_parity", "pass", kind="tokenizer", version="0.18.0")
        rc = record_recheck(s, trigger_result_id=failed, recipe_digest=h("recipe"), kind="parity", siblings=[b])
        _gate(s, b, "logits_parity", "pass", recheck_id=rc)
    with db.session() as s:
        rec_a = lineage(s, a)
        rec_b = lineage(s, b)
    assert rec_a["siblings"] == [b] and c not in rec_a["siblings"]
    assert {(g["gate"], g["status"], g["runtime_version"]) for g in rec_a["gates"]} == {
        ("logits_parity", "fail", "0.18.1"), ("tokenizer_parity", "pass", "0.18.0")}
    (r,) = rec_a["rechecks"]
    assert r["trigger"]["gate"] == "logits_parity" and r["trigger"]["status"] == "fail"
    assert r["siblings"] == [b] and r["results"][0]["artifact_sha256"] == b
    # The sibling's own lineage shows the re-check it took part in.
    assert rec_b["rechecks"][0]["id"] == r["id"]
    assert rec_b["gates"][0]["recheck_id"] == r["id"]


def test_render_lineage_lists_gates_per_runtime_version(db):
    from farm.lineage.report import render_lineage

    with db.session() as s:
        a = _seed(s, "one", "q1")["bundle"]
    with db.session() as s:
        _gate(s, a, "logits_parity", "pass", version="0.18.1")
        _gate(s, a, "logits_parity", "fail", version="0.18.0")
    with db.session() as s:
        text = render_lineage(lineage(s, a))
    assert "litert-lm-api 0.18.0 (cpu)" in text and "litert-lm-api 0.18.1 (cpu)" in text
    assert text.index("0.18.0 (cpu)") < text.index("0.18.1 (cpu)")


def test_device_results_show_in_lineage_with_their_prompt_lengths(db):
    from datetime import datetime, timezone

    from farm.lineage.queries.devices import last_device_runs
    from farm.lineage.record import record_device_result
    from farm.lineage.report import render_lineage

    with db.session() as s:
        a = _seed(s, "one", "q1")["bundle"]
    now = datetime.now(timezone.utc)
    common = dict(artifact_sha256=a, accelerator="cpu", runs=3, cache_mode="no", started_at=now, finished_at=now,
                  env={"os": "Debian"}, evidence=["Prefill Speed: 100 tokens/sec"], protocol={}, runtime="litert-lm",
                  runtime_version="0.18.1")
    with db.session() as s:
        record_device_result(s, device_id="local-cpu", status="verified", prefill_tokens=32, decode_tokens=24,
                             prefill_tokens_per_s=100.0, decode_tokens_per_s=50.0, ttft_ms=30.0, peak_mem_mb=80.0, **common)
        record_device_result(s, device_id="pi5", status="failed", failure_class="zero_throughput", prefill_tokens=32,
                             decode_tokens=24, **common)
    with db.session() as s:
        rec = lineage(s, a)
        last = last_device_runs(s)
    assert [(d["device_id"], d["status"]) for d in rec["devices"]] == [("local-cpu", "verified"), ("pi5", "failed")]
    assert last["pi5"]["failure_class"] == "zero_throughput"
    text = render_lineage(rec)
    assert "local-cpu" in text and "decode 50.0 tok/s" in text and "failed (zero_throughput)" in text
    assert "-p 32 -d 24" in text


def test_insert_ignore_says_whether_it_inserted(db):
    """On both databases (psycopg reports rowcount -1 for ON CONFLICT DO NOTHING: not a yes)."""
    from farm.lineage.record import lease_holder, release_lease, try_acquire_lease

    with db.session() as s:
        assert try_acquire_lease(s, h("k"), "host.1", "making x") is True
    with db.session() as s:
        assert try_acquire_lease(s, h("k"), "host.2", "making x") is False
        assert lease_holder(s, h("k"))["holder"] == "host.1"
        release_lease(s, h("k"), "host.2")  # not its lease: nothing happens
        assert lease_holder(s, h("k")) is not None
        release_lease(s, h("k"), "host.1")
        assert lease_holder(s, h("k")) is None


def test_each_store_an_artifact_is_in_is_recorded(db):
    from farm.lineage.record import record_location

    with db.session() as s:
        ids = _seed(s, "loc", "qloc")
        record_location(s, ids["bundle"], f"s3://bucket/prefix/sha256/{ids['bundle'][:2]}/{ids['bundle'][2:4]}/{ids['bundle']}")
    with db.session() as s:
        locs = lineage(s, ids["bundle"])["locations"]
    assert [loc["store_url"] for loc in locs] == ["file:///b", "s3://bucket/prefix"]


def test_prefix_lookup_is_a_range_on_the_key(db):
    from farm.lineage.queries.artifacts import _next_prefix

    assert _next_prefix("abf") == "ac0" and _next_prefix("0fff") == "1000" and _next_prefix("ffff") is None
    with db.session() as s:
        for sha in ("abf" + "0" * 61, "ac0" + "0" * 61, "f" * 64):
            record_artifact(s, sha256=sha, kind="tokenizer", size=1, uri=f"file:///{sha[:4]}")
    with db.session() as s:
        assert resolve_sha(s, "abf0") == "abf" + "0" * 61  # "ac0…" is past the range
        assert resolve_sha(s, "ffff") == "f" * 64  # no upper bound
        assert resolve_sha(s, "ABF0") == "abf" + "0" * 61  # upper-case input, lower-case keys
        with pytest.raises(BadInput, match="no artifact"):
            resolve_sha(s, "abe0")


def test_largest_export_peaks_are_the_largest_recorded_exports_made_the_same_way_per_regime(db):
    """The too-large refusal's basis: per regime (float export under 2 GiB, or 2 GiB or more), the
    biggest recorded export (10M+ params) of the memory mode asked for; a tiny model's peak, all
    fixed cost, is never used, nor an export made another way or recorded before the mode was (an
    earlier toolchain held the weights three times: its peak would refuse what now fits); no such
    export, no figure (the refusal's default)."""
    from farm.lineage.queries.artifacts import largest_export_peaks

    with db.session() as s:
        assert largest_export_peaks(s, "once") == {}
        record_artifact(s, sha256=h("tiny-float"), kind="float_tflite", size=2_000_000, uri="file:///a",
                        details={"peak_rss_bytes": 800 * 2**20, "source_params": 240_000, "memory_mode": "once"})
        record_artifact(s, sha256=h("old"), kind="float_tflite", size=3 * 10**9, uri="file:///a",
                        details={"peak_rss_bytes": 19 * 2**30, "source_params": 750_000_000})
        assert largest_export_peaks(s, "once") == {}
        for name, params, size, peak, mode in (
                ("mid", 45_000_000, 180_000_000, 2 * 2**30, "once"),
                ("big", 334_000_000, 1_340_000_000, 7 * 2**30, "once"),
                ("full", 733_000_000, 2_940_000_000, 10 * 2**30, "once"),
                ("light", 500_000_000, 2_000_000_000, 5 * 2**30, "once+lightweight")):
            record_artifact(s, sha256=h(name), kind="float_tflite", size=size, uri="file:///a",
                            details={"peak_rss_bytes": peak, "source_params": params, "memory_mode": mode})
    with db.session() as s:
        assert largest_export_peaks(s, "once") == {"small": (7 * 2**30, 334_000_000, h("big")),
                                                   "large": (10 * 2**30, 733_000_000, h("full"))}
        assert largest_export_peaks(s, "once+lightweight") == {"small": (5 * 2**30, 500_000_000, h("light"))}


def test_the_generation_moves_with_every_write_lineage_shows_and_only_then(db):
    """What `farm api` caches against (farm/lineage/db.py): ORM inserts, Core inserts, in-place
    updates (a re-check's runs) each move it once per transaction; reading, and taking or dropping a
    lease (a build does that all the time), do not: the negative controls."""
    from farm.lineage.queries.artifacts import lineage, lineage_generation
    from farm.lineage.record import record_recheck, record_recheck_runs, release_lease, try_acquire_lease

    def gen() -> int:
        with db.session() as s:
            return lineage_generation(s)

    start = gen()
    with db.session() as s:
        files = _seed(s, "a", "tfl")
    assert gen() == start + 1  # one transaction, one step
    with db.session() as s:
        lineage(s, files["bundle"])  # a read
    assert gen() == start + 1
    with db.session() as s:
        assert try_acquire_lease(s, h("lease"), "host.1", "convert")  # Core insert into leases
    with db.session() as s:
        release_lease(s, h("lease"), "host.1")
    assert gen() == start + 1
    with db.session() as s:
        gid = _gate(s, files["bundle"], "logits_parity", "pass")  # an ORM insert
    assert gen() == start + 2
    with db.session() as s:
        rid = record_recheck(s, trigger_result_id=gid, kind="parity", siblings=[])
    with db.session() as s:
        record_recheck_runs(s, rid, ["run-1"])  # an update in place, flushed at commit
    assert gen() == start + 4
    try:
        with db.session() as s:
            _gate(s, files["bundle"], "logits_parity", "pass")
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert gen() == start + 4  # a rolled-back write changed nothing


def test_a_lookup_by_prefix_in_a_reading_session_is_the_record_with_its_newest_recipe_search(db):
    """`lookup` (what `farm api` and `farm lineage` answer) reads the artifact, its source, toolchain
    and newest recipe search in the statement that resolves the prefix: the same record as
    `lineage`, in the API's read-only session too (autocommit on PostgreSQL)."""
    from farm.errors import UnknownArtifact
    from farm.lineage.queries.artifacts import lookup
    from farm.lineage.record import start_tune_search

    with db.session() as s:
        ids = _seed(s, "one", "q1")
    with db.reading() as s:
        rec = lookup(s, ids["bundle"][:10])
        assert rec["tune_search"] is None
        with db.session() as w:
            assert {k: v for k, v in rec.items() if k != "tune_search"} == lineage(w, ids["bundle"])
    with db.session() as s:
        for status in ("not_met", "met"):
            start_tune_search(s, model_id="tiny", config_name="tiny", float_sha256=h("float"), target={},
                              recipe_name="r", bundle_sha256=ids["bundle"], reason=status)
    with db.reading() as s:
        assert lookup(s, ids["bundle"])["tune_search"]["reason"] == "met"  # the newest
        assert "tune_search" not in lookup(s, ids["tflite"])  # only a bundle is chosen by a search
        with pytest.raises(UnknownArtifact):
            lookup(s, "0000")
        with pytest.raises(BadInput, match="not a sha256"):
            lookup(s, "xyz")
