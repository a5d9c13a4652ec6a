"""A build answered from lineage (farm/recorded.py) without the toolchain or Prefect: the stages'
cache read under `recorded_only()` (a miss is NotRecorded and nothing is made), and each of the
build's four questions (stages, gates, devices, card) falling back to the flow when lineage lacks
the answer: one negative control per question next to the passing case."""

from __future__ import annotations

import pytest

import farm.cards.publish
import farm.devices
import farm.devices.bench
import farm.recorded as recorded
from farm.lineage.db import Database
from farm.lineage.record import record_stored
from farm.resources import Resources
from farm.settings import Settings
from farm.stages.common import ArtifactRef, NotRecorded, StageResult, recorded_only, run_cached
from farm.store.local import LocalStore


@pytest.fixture
def res(tmp_path):
    r = Resources(Settings(home=tmp_path / "home", cache=tmp_path / "cache"))
    r.__dict__["store"] = LocalStore(tmp_path / "home" / "store")
    r.__dict__["db"] = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    return r


def test_recorded_only_reads_the_stage_cache_and_never_computes(res, tmp_path):
    made = []

    def compute() -> str:
        made.append(1)
        f = tmp_path / "out.bin"
        f.write_bytes(b"stage output")
        ref = res.store.put_file(f)
        with res.db.session() as s:
            record_stored(s, ref, "float_tflite")
        return ref.sha256

    with recorded_only(), pytest.raises(NotRecorded, match="the convert stage"):
        run_cached(res, "convert", "k" * 64, compute)
    assert made == []
    first = run_cached(res, "convert", "k" * 64, compute)
    assert first.status == "ran" and made == [1]
    with recorded_only():
        again = run_cached(res, "convert", "k" * 64, compute)
    assert again.status == "cached" and again.artifact.sha256 == first.artifact.sha256 and made == [1]
    # Negative control: the recorded output's bytes are gone from the store, so the stage would run.
    res.store.delete(first.artifact.sha256)
    with recorded_only(), pytest.raises(NotRecorded):
        run_cached(res, "convert", "k" * 64, compute)
    assert made == [1]


class _Cfg:
    name = "tiny"

    class card:  # noqa: N801 - the config's card section
        @staticmethod
        def model_dump(mode: str = "json") -> dict:
            return {}

    @staticmethod
    def bundle_name(recipe: str) -> str:
        return f"tiny_{recipe}.litertlm"


class _Job:
    config = _Cfg()

    class recipe:  # noqa: N801
        name = "r"


def _stage(name: str, sha: str = "b" * 64) -> StageResult:
    return StageResult(name=name, status="cached", seconds=0.01, cache_key="k",
                       artifact=ArtifactRef(sha256=sha, uri="file:///b", size=3, kind="litertlm"))


class _Device:
    id = "local-cpu"

    class runner:  # noqa: N801
        kind = "local"


class _Registry:
    @staticmethod
    def enabled():
        return [_Device()]


GATE = {"id": 1, "gate": "metadata", "status": "pass", "artifact_sha256": "b" * 64, "runtime_version": "0.18.1",
        "metrics": {}, "findings": [], "evidence": [], "reused": True}
DEVICE = {"id": 2, "device_id": "local-cpu", "accelerator": "cpu", "status": "verified", "decode_tokens_per_s": 9.0,
          "finished_at": "2026-12-05T12:00:00", "reused": True}
CARD = {"model_id": "tiny", "card_sha256": "c" * 64, "new": False, "uris": {"card.json": "file:///c"}}


@pytest.fixture
def answers(monkeypatch):
    """Every question answered from lineage; a test takes one answer away."""
    state = {"stages": True, "gates": [GATE], "devices": [DEVICE], "card": CARD}

    def stages(res, job, progress=None):
        if not state["stages"]:
            raise NotRecorded("the convert stage")
        return {n: _stage(n) for n in ("source", "convert", "quantize", "package", "hash")}

    def gates(res, sha, job):
        if state["gates"] is None:
            raise NotRecorded("gate metadata has no result")
        return state["gates"]

    monkeypatch.setattr(recorded, "run_stages", stages)
    monkeypatch.setattr(recorded, "recorded_gates", gates)
    monkeypatch.setattr(farm.devices, "load_registry", lambda: _Registry())
    monkeypatch.setattr(farm.devices.bench, "recorded_device_results", lambda res, sha, d: state["devices"])
    monkeypatch.setattr(farm.cards.publish, "unchanged_card", lambda res, model, cfg: state["card"])
    return state


def test_a_build_with_every_answer_recorded_is_reported_without_a_flow(answers):
    summary, events = recorded.recorded_build(None, _Job())
    assert summary["artifact"]["sha256"] == "b" * 64
    assert [g["gate"] for g in summary["gates"]] == ["metadata"] and summary["gates"][0]["reused"]
    assert summary["devices"][0]["status"] == "verified" and summary["card"]["unchanged"]
    assert [e["kind"] for e in events] == ["stage"] * 5 + ["gate", "device", "card"]
    assert events[6]["status"] == "reused"
    # --no-gates: neither gates nor the card are asked (the flow runs neither).
    answers["gates"] = answers["card"] = None
    summary, _ = recorded.recorded_build(None, _Job(), run_gates=False, run_bench=False)
    assert "gates" not in summary and "card" not in summary and "devices" not in summary


@pytest.mark.parametrize("missing", ["stages", "gates", "devices", "card"])
def test_any_answer_lineage_lacks_runs_the_flow(answers, missing):
    answers[missing] = False if missing == "stages" else None
    assert recorded.recorded_build(None, _Job()) is None


class _Ctx:
    class config:  # noqa: N801
        skip: list[str] = []

        @staticmethod
        def enables(name: str) -> bool:
            return False

    class classes:  # noqa: N801  (this host's class only)
        presented = [None]

    def close(self) -> None:
        pass


@pytest.mark.parametrize("status, answered", [("pass", True), ("warn", True), ("fail", False), ("could_not_run", False)])
def test_a_recorded_gate_failure_runs_the_flow(monkeypatch, status, answered):
    """A failing build's flow run ends Failed and prints why: a recorded failure is not a no-op."""
    import farm.gates.suite as suite

    monkeypatch.setattr(suite.SuiteContext, "open", classmethod(lambda cls, res, sha, cfg=None: _Ctx()))
    monkeypatch.setattr(suite, "recorded_result",
                        lambda ctx, spec, device=None: (True, {**GATE, "gate": spec.name, "status": status}))
    job = _Job()
    job.config.gates = None
    if answered:
        assert {r["status"] for r in recorded.recorded_gates(None, "b" * 64, job)} == {status}
    else:
        with pytest.raises(NotRecorded, match="failed"):
            recorded.recorded_gates(None, "b" * 64, job)
