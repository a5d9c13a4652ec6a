"""The gate suite without the toolchain (fast): the context resolved once per suite, the reference
rebuilt from the store and checked file by file, the reuse key, could_not_run, and which siblings a
failure's re-check covers. The toolchain is a fake that answers like the real one (the recorded
response shape of farm_toolchain/gates/common.py:result)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.gates.config import GateConfig
from farm.digest import digest
from farm.errors import BadInput, BuildFailed
from farm_common.gates import GATES
from farm.devices.classes import ClassTarget, ClassTargets
from farm.devices.registry import Device
from farm.gates.suite import SuiteContext, failure_line, recorded_result, run_gate
from farm.lineage.db import Database
from farm.lineage.queries.gates import gate_result, recheck_basis
from farm.lineage.record import record_artifact, record_gate_result, record_recipe, record_source, record_toolchain
from farm.resources import Resources
from farm.settings import Settings
from farm.source_folder import SourceFileChanged, generation_settings, hash_folder, materialize_source
from farm.store.local import LocalStore
from farm_common.cpu_classes import CpuView


class CountingStore(LocalStore):
    def __init__(self, root):
        super().__init__(root)
        self.verified: list[str] = []

    def open_verified_path(self, sha256):
        self.verified.append(sha256)
        return super().open_verified_path(sha256)


HOST_VIEW = CpuView("x86_64", ("avx", "avx2", "avx512f", "fma"), "testhost")
AVX2_VIEW = CpuView("x86_64", ("avx", "avx2", "fma"), "testhost", "cpuid_mask")


class FakeToolchain:
    """Answers `gate` (and `cpu_view`) like the real toolchain; raises when told to. A request with
    a `cpu` presentation answers as that class (AVX2 here)."""

    identity = {"packages": {"litert-lm-api": "0.18.1"}}
    python = Path("/fake/toolchain/python")

    def __init__(self):
        self.requests: list[dict] = []
        self.fail_with: Exception | None = None
        self.reports: CpuView | None = None  # report another class than presented (a lying host)

    def call(self, command, request, progress=None):
        view = AVX2_VIEW if request.get("cpu") else HOST_VIEW
        if command == "cpu_view":
            return {"ok": True, "cpu": view.to_dict()}
        assert command == "gate"
        self.requests.append(request)
        if self.fail_with is not None:
            raise self.fail_with
        return {"ok": True, "status": "pass", "metrics": {"x": 1}, "evidence": ["e"], "findings": ["f"],
                "runtime": {"package": "litert-lm-api", "version": "0.18.1"}, "backend": "cpu",
                "cpu": (self.reports or view).to_dict()}


@pytest.fixture
def farm(tmp_path):
    """A real lineage DB and store holding one recorded source (its files stored) and one bundle."""
    settings = Settings(home=tmp_path / "home", cache=tmp_path / "cache")
    res = Resources(settings)
    res.__dict__["store"] = store = CountingStore(tmp_path / "home" / "store")
    res.__dict__["toolchain"] = FakeToolchain()
    res.__dict__["db"] = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    (src_dir / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5ForCausalLM"], "eos_token_id": 9}))
    (src_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
    (src_dir / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}, "added_tokens": []}))
    (src_dir / "model.safetensors").write_bytes(b"weights" * 100)
    files = hash_folder(src_dir)
    for f in files:
        store.put_file(src_dir / f["path"])
    bundle = tmp_path / "b.litertlm"
    bundle.write_bytes(b"LITERTLM" + b"\0" * 100)
    bref = store.put_file(bundle)
    tok = next(f for f in files if f["path"] == "tokenizer.json")
    with res.db.session() as s:
        tc = record_toolchain(s, {"freeze_sha256": "c" * 64, "python": "3.11", "packages": {}, "freeze": ""})
        res.__dict__["toolchain_id"] = tc
        record_source(s, id="s" * 64, kind="local", name="tiny", family="qwen3_5", repo_id=None, revision=None,
                      path=str(src_dir), spec={}, files=files, tokenizer_sha256=tok["sha256"],
                      generation=generation_settings(src_dir))
        record_artifact(s, sha256=tok["sha256"], kind="tokenizer", size=tok["size"], uri="file:///t", source_id="s" * 64)
        record_artifact(s, sha256=bref.sha256, kind="litertlm", size=bref.size, uri=bref.uri, name="tiny_r.litertlm",
                        source_id="s" * 64, inputs={"tokenizer": tok["sha256"]},
                        details={"metadata": {"prefill_lengths": [8], "cache_length": 64}})
    store.verified.clear()
    return {"res": res, "store": store, "bundle": bref.sha256, "src": src_dir, "files": files}


def test_generation_settings_prefer_generation_config_and_refuse_a_source_without_an_end(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 9}))
    assert generation_settings(tmp_path) == {"eos_token_ids": [9], "from": "config.json"}
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 2, 7]}))
    assert generation_settings(tmp_path) == {"eos_token_ids": [2, 7], "from": "generation_config.json"}
    for p in tmp_path.iterdir():
        p.unlink()
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"id": 5, "content": "</s>"}]}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert generation_settings(tmp_path) == {"eos_token_ids": [5], "from": "tokenizer_config.json"}
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(BadInput, match="declares no end-of-sequence token"):
        generation_settings(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(BadInput, match="must be a JSON object"):
        generation_settings(tmp_path)


def test_the_suite_reads_the_bundle_once_and_materializes_nothing_it_does_not_need(farm):
    ctx = SuiteContext.open(farm["res"], farm["bundle"])
    try:
        assert ctx.reference_stop_ids == [2, 7]  # recorded with the source, not read from any bundle
        for _ in range(3):
            assert Path(ctx.local("bundle")).is_file()
        assert farm["store"].verified == [farm["bundle"]]
    finally:
        ctx.close()


def test_the_reference_is_rebuilt_from_the_store_even_when_the_folder_is_gone(farm, tmp_path):
    for p in farm["src"].iterdir():
        p.unlink()
    farm["src"].rmdir()
    ref = materialize_source(farm["res"], {"id": "s" * 64, "path": str(farm["src"]), "files": farm["files"]},
                             tmp_path / "ref")
    assert sorted(p.name for p in ref.iterdir()) == sorted(f["path"] for f in farm["files"])
    assert (ref / "model.safetensors").read_bytes() == b"weights" * 100


def test_an_edited_source_file_missing_from_the_store_is_refused_by_name_and_an_unchanged_one_heals(farm, tmp_path):
    cfg = next(f for f in farm["files"] if f["path"] == "config.json")
    farm["store"].delete(cfg["sha256"])
    source = {"id": "s" * 64, "path": str(farm["src"]), "files": farm["files"]}
    original = (farm["src"] / "config.json").read_bytes()
    (farm["src"] / "config.json").write_bytes(original + b" ")
    with pytest.raises(SourceFileChanged, match="source file 'config.json'"):
        materialize_source(farm["res"], source, tmp_path / "a")
    (farm["src"] / "config.json").write_bytes(original)
    materialize_source(farm["res"], source, tmp_path / "b")
    assert farm["store"].exists(cfg["sha256"])


def test_results_are_reused_only_for_the_same_request_and_a_failed_call_is_could_not_run(farm):
    res, spec = farm["res"], GATES.get("metadata")
    ctx = SuiteContext.open(res, farm["bundle"])
    try:
        first = run_gate(ctx, spec, reuse=True)
        again = run_gate(ctx, spec, reuse=True)
        assert first["status"] == "pass" and not first["reused"] and again["reused"] and again["id"] == first["id"]
        assert len(res.toolchain.requests) == 1
        sent = res.toolchain.requests[0]
        assert sent["gate"] == "metadata" and sent["reference_stop_ids"] == [2, 7]
        assert Path(sent["bundle_path"]).is_file() and Path(sent["tokenizer_json"]).is_file()
        assert first["request_digest"] == digest({"gate": "metadata", "version": spec.version,
                                                  "args": {k: v for k, v in first["config"].items()},
                                                  "inputs": first["inputs"]})
    finally:
        ctx.close()
    # Another input (a changed threshold) is another measurement.
    ctx = SuiteContext.open(res, farm["bundle"], GateConfig.model_validate({"tokenizer_parity": {"require_round_trip": True}}))
    try:
        a = run_gate(ctx, GATES.get("tokenizer_parity"), reuse=True)
        ctx.config = GateConfig()
        b = run_gate(ctx, GATES.get("tokenizer_parity"), reuse=True)
        assert not a["reused"] and not b["reused"] and a["request_digest"] != b["request_digest"]
        res.toolchain.fail_with = BuildFailed("gate: RuntimeError: the runtime crashed")
        c = run_gate(ctx, GATES.get("multi_turn"), reuse=True)
        assert c["status"] == "could_not_run" and "the runtime crashed" in c["evidence"][0]
        d = run_gate(ctx, GATES.get("multi_turn"), reuse=True)  # a could_not_run is never reused
        assert d["id"] != c["id"]
    finally:
        ctx.close()



def _two_classes(res) -> ClassTargets:
    """This host's class and an AVX2 class device (its presentation is what the fake answers to)."""
    host_dev = Device(id="local-cpu", name="host", accelerators=["cpu"], runner={"kind": "local"})
    avx2_dev = Device(id="cpu-x86-avx2", name="avx2", accelerators=["cpu"],
                      runner={"kind": "cpuid_mask", "cpu_class": "x86-avx2"})
    return ClassTargets(presented=[ClassTarget(host_dev, None, HOST_VIEW),
                                  ClassTarget(avx2_dev, {"class_id": "x86-avx2", "how": "cpuid_mask"}, AVX2_VIEW)])


def test_a_result_names_its_cpu_class_and_is_never_reused_for_another(farm):
    """Issue 34: the class is part of the reuse key. The negative control: the same request on the
    AVX2 class after the host's result measures again (and records the class it ran on); a runtime
    that reports another class than presented is could_not_run, never recorded as the class."""
    res, spec = farm["res"], GATES.get("generation_parity")
    ctx = SuiteContext.open(res, farm["bundle"])
    ctx.use_classes(_two_classes(res))
    try:
        host = run_gate(ctx, spec, reuse=True)
        avx2 = run_gate(ctx, spec, reuse=True, device="cpu-x86-avx2")
        assert not host["reused"] and not avx2["reused"] and host["request_digest"] == avx2["request_digest"]
        assert (host["device"], host["cpu_class"], host["cpu"]["how"]) == ("local-cpu", HOST_VIEW.key, "native")
        assert (avx2["device"], avx2["cpu_class"], avx2["cpu"]["label"]) == ("cpu-x86-avx2", AVX2_VIEW.key, "x86-64 AVX2")
        assert host["host"] == avx2["host"] == "testhost"
        assert "cpu" not in res.toolchain.requests[0] and res.toolchain.requests[1]["cpu"]["class_id"] == "x86-avx2"
        # Each class reuses its own result, and only its own.
        assert run_gate(ctx, spec, reuse=True)["id"] == host["id"]
        assert run_gate(ctx, spec, reuse=True, device="cpu-x86-avx2")["id"] == avx2["id"]
        assert recorded_result(ctx, spec, "cpu-x86-avx2")[1]["id"] == avx2["id"]
        # A runtime host that came up as another class: nothing is recorded as the AVX2 class's answer.
        res.toolchain.reports = HOST_VIEW
        other = run_gate(ctx, GATES.get("multi_turn"), reuse=True, device="cpu-x86-avx2")
        assert other["status"] == "could_not_run" and "not x86-64 AVX2" in other["evidence"][0]
        assert "[x86-64 AVX2]" in failure_line(other)
        with pytest.raises(BadInput, match="not a CPU class this host presents"):
            ctx.target("cpu-arm64-dotprod")
    finally:
        ctx.close()


def test_a_recorded_result_is_read_without_measuring_and_only_for_the_same_request(farm):
    """What a no-op build reads instead of running a gate (farm/recorded.py): nothing before the gate
    ran, the very result the suite would reuse after, and nothing again for another threshold (the
    negative control: a changed request is another measurement)."""
    res, spec = farm["res"], GATES.get("tokenizer_parity")
    ctx = SuiteContext.open(res, farm["bundle"])
    try:
        assert recorded_result(ctx, spec) == (True, None)
        first = run_gate(ctx, spec, reuse=True)
        applies, found = recorded_result(ctx, spec)
        assert applies and found["id"] == first["id"] and found["reused"]
        assert len(res.toolchain.requests) == 1  # reading measured nothing
        ctx.config = GateConfig.model_validate({"tokenizer_parity": {"require_round_trip": True}})
        assert recorded_result(ctx, spec) == (True, None)
        assert recorded_result(ctx, GATES.get("logits_parity_float")) == (False, None)  # no float export
    finally:
        ctx.close()

def _art(s, sha, kind, **kw):
    record_artifact(s, sha256=sha, kind=kind, size=1, uri=f"file:///{sha[:4]}", **kw)


def test_a_recheck_follows_the_failures_cause(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'l.db'}")
    h = lambda t: digest(t)  # noqa: E731
    with db.session() as s:
        record_recipe(s, h("r1"), "r1", {}, [])
        record_recipe(s, h("r2"), "r2", {}, [])
        # Two float exports with one export configuration (X), one with another (Y).
        for f, key in (("fa", "X"), ("fb", "X"), ("fc", "Y")):
            _art(s, h(f), "float_tflite", details={"export_digest": h(key)})
        for q, f, r in (("qa1", "fa", "r1"), ("qa2", "fa", "r2"), ("qb1", "fb", "r1"), ("qc1", "fc", "r1")):
            _art(s, h(q), "quantized_tflite", recipe_digest=h(r), inputs={"float_model": h(f)})
            _art(s, h("b" + q), "litertlm", recipe_digest=h(r), inputs={"model": h(q)})
        s.flush()

        def result(sha, gate, status):
            from datetime import datetime, timezone

            now = datetime.now(timezone.utc)
            rid = record_gate_result(s, artifact_sha256=sha, gate=gate, gate_version=1, kind="parity", status=status,
                                     runtime="litert-lm-api", runtime_version="0.18.1", backend="cpu", device="d",
                                     metrics={}, evidence=[], findings=[], config={}, toolchain_id=None,
                                     flow_run_id=None, recheck_id=None, started_at=now, finished_at=now)
            return gate_result(s, rid)

        # The float export passed, the bundle failed: the recipe's other bundles.
        result(h("fa"), "logits_parity_float", "pass")
        basis = recheck_basis(s, result(h("bqa1"), "generation_parity", "fail"))
        assert basis["basis"] == "recipe" and set(basis["siblings"]) == {h("bqb1"), h("bqc1")}
        # The float export was not shown sound (skipped: a fused custom op): the export configuration's.
        result(h("fa"), "logits_parity_float", "skipped")
        basis = recheck_basis(s, result(h("bqa1"), "generation_parity", "fail"))
        assert basis["basis"] == "export_config" and basis["key"] == h("X")
        assert set(basis["siblings"]) == {h("bqa2"), h("bqb1")}
        # The float export itself failed: every bundle of that export configuration.
        basis = recheck_basis(s, result(h("fa"), "logits_parity_float", "fail"))
        assert basis["basis"] == "export_config" and set(basis["siblings"]) == {h("bqa1"), h("bqa2"), h("bqb1")}


def test_a_gate_the_family_knows_fails_with_the_installed_runtime_is_named_so_rechecks_skip_it():
    """flows/gates.py re-checks siblings for fresh failures except these: a runtime defect the
    family declares is not the recipe's."""
    from types import SimpleNamespace

    from farm.families import get_family
    from farm.gates.suite import SuiteContext

    def ctx(runtime: str, family: str = "gemma3_vl") -> SuiteContext:
        res = SimpleNamespace(toolchain=SimpleNamespace(identity={"packages": {"litert-lm": runtime}}))
        return SuiteContext(res=res, bundle_sha="a" * 64, facts={}, config=None, family=get_family(family))

    assert ctx("0.18.1").known_failure("second_turn_parity").tool == "litert-lm"
    # Negative controls: another runtime, another gate, a family without it.
    assert ctx("0.19.0").known_failure("second_turn_parity") is None
    assert ctx("0.18.1").known_failure("image_turn_parity") is None
    assert ctx("0.18.1", "gemma3").known_failure("second_turn_parity") is None
