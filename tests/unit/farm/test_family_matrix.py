"""The family matrix (farm/family_matrix.py, farm/lineage/queries.py family_matrix): each family's
newest outcome per column from lineage, a stage failure named with its tool, version and reason, the
table written only between the README's markers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from farm.errors import BadInput
from farm.family_matrix import END, START, markdown, matrix, matrix_configs, verdict, write_between_markers
from farm.lineage.db import Database
from farm.lineage.queries.artifacts import family_matrix
from farm.lineage.record import (record_artifact, record_device_result, record_gate_result, record_recipe,
                                 record_source, record_stage_failure)

T0 = datetime(2026, 12, 5, tzinfo=timezone.utc)


def _bundle(db: Database, sha: str, family: str, recipe: str, at: datetime, gates: dict[str, str]) -> None:
    with db.session() as s:
        record_source(s, id=family * 4, kind="generated", name=f"tiny-{family}", family=family, spec={}, files=[])
        record_recipe(s, recipe * 2 if len(recipe) < 32 else recipe, recipe, {}, [])
        record_artifact(s, sha256=sha, kind="litertlm", size=10, uri="file:///x", model_id=f"tiny-{family}",
                        source_id=family * 4, recipe_digest=recipe * 2, created_at=at)
        for gate, status in gates.items():
            record_gate_result(s, artifact_sha256=sha, gate=gate, gate_version=1, kind="runtime", status=status,
                               runtime="litert-lm", runtime_version="0.18.1", backend="cpu", device="local",
                               findings=[f"{gate} said {status}"], started_at=at, finished_at=at)
        record_device_result(s, artifact_sha256=sha, device_id="local-cpu", accelerator="cpu", status="verified",
                             prefill_tokens=32, decode_tokens=32, runs=1, runtime_version="0.18.1", env={},
                             evidence=[], protocol={}, started_at=at, finished_at=at)


def _failure(db: Database, family: str, recipe: str, at: datetime) -> None:
    with db.session() as s:
        record_stage_failure(s, model_id=f"tiny-{family}", family=family, recipe_name=recipe, stage="convert",
                             tool="litert-torch", tool_version="0.10.0", error="export: Lowering not found: aten.histc",
                             log_path="/tmp/farm.log", created_at=at)


def test_the_newest_outcome_of_each_column_a_later_stage_failure_included(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    _bundle(db, "a" * 64, "qwen3", "dynamic_wi8_afp32", T0, {"metadata": "pass", "generation_parity": "pass"})
    _bundle(db, "b" * 64, "qwen2", "dynamic_wi8_afp32", T0, {"metadata": "pass", "generation_parity": "fail"})
    _failure(db, "qwen3", "float32", T0)  # no bundle of that column: the failure is its row
    _failure(db, "qwen2", "dynamic_wi8_afp32", T0 - timedelta(hours=1))  # older than its bundle: not shown
    with db.session() as s:
        rows = family_matrix(s)
    by = {(r["family"], r["recipe"]): r for r in rows}
    assert by[("qwen3", "dynamic_wi8_afp32")]["outcome"] == "bundle"
    assert by[("qwen3", "dynamic_wi8_afp32")]["gates"]["metadata"]["status"] == "pass"
    assert by[("qwen3", "dynamic_wi8_afp32")]["devices"]["local-cpu/cpu"]["status"] == "verified"
    assert by[("qwen3", "dynamic_wi8_afp32")]["litert_lm"] == "0.18.1"
    assert by[("qwen3", "float32")]["outcome"] == "failed" and by[("qwen3", "float32")]["tool_version"] == "0.10.0"
    assert by[("qwen2", "dynamic_wi8_afp32")]["outcome"] == "bundle"  # the failure before it is history
    _failure(db, "qwen2", "dynamic_wi8_afp32", T0 + timedelta(hours=1))  # a later failed rebuild is the news
    with db.session() as s:
        assert {(r["family"], r["recipe"]): r for r in family_matrix(s)}[("qwen2", "dynamic_wi8_afp32")]["outcome"] \
            == "failed"

    with db.session() as s:
        entries = {e["family"]: e for e in matrix(family_matrix(s))}
    assert entries["qwen3"]["int8"]["sha256"] == "a" * 64 and entries["qwen3"]["float"]["stage"] == "convert"
    assert entries["llama"]["float"] is None  # registered, never built here
    assert verdict(entries["qwen3"]["int8"]) == "✓ 2/2 gates; local-cpu/cpu verified"
    assert verdict(entries["qwen3"]["float"]).startswith("✗ convert (litert-torch 0.10.0): export: Lowering not found")
    assert verdict(None) == "not built"
    table = markdown(list(entries.values()))
    assert "| `qwen3` | Qwen3ForCausalLM | ✗ convert" in table and "| `llama` | LlamaForCausalLM | not built |" in table


def test_a_failing_gate_is_a_cross_with_its_name_not_a_tick():
    """Negative control of the verdict: one failing gate of nine makes the cell a failure naming it."""
    cell = {"outcome": "bundle", "gates": {"metadata": {"status": "pass"}, "generation_parity": {"status": "fail"}},
            "devices": {}}
    assert verdict(cell) == "✗ 1/2 gates; fails generation_parity"
    assert verdict({"outcome": "bundle", "gates": {}, "devices": {}}).startswith("✗ 0/0")  # no gate ran: no tick


def test_the_table_goes_between_the_markers_and_a_file_without_them_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{START}\nold table\n{END}\nafter\n")
    write_between_markers(readme, "| new |\n")
    assert readme.read_text() == f"# x\n\nbefore\n{START}\n| new |\n{END}\nafter\n"
    plain = tmp_path / "OTHER.md"
    plain.write_text("no markers\n")
    with pytest.raises(BadInput, match="no family-matrix markers"):
        write_between_markers(plain, "| new |\n")
    assert plain.read_text() == "no markers\n"


def test_every_matrix_config_is_a_generated_model_of_a_registered_family_and_every_family_has_one():
    import yaml

    from farm.config import load_config
    from farm.families import family_names

    seen = set()
    for path in matrix_configs():
        cfg = load_config(path)
        assert cfg.source.kind == "generated", path
        seen.add(cfg.family)
    assert seen == set(family_names())
    assert all(yaml.safe_load(p.read_text())["source"]["family"] for p in matrix_configs())


def test_a_declared_failure_is_marked_known_and_a_refusal_says_so():
    gates = {"metadata": {"status": "pass"}, "generation_parity": {"status": "fail"}}
    cell = {"outcome": "bundle", "gates": gates, "devices": {}}
    assert verdict(cell) == "✗ 1/2 gates; fails generation_parity"
    assert verdict(cell, {"generation_parity"}) == "✗ 1/2 gates; fails generation_parity (known)"
    failed = {"outcome": "failed", "stage": "convert", "tool": "litert-torch", "tool_version": "0.10.0",
              "error": "export: 'NoneType' object has no attribute 'layers'"}
    assert verdict(failed, {"convert"}).startswith("✗ convert (known) (litert-torch 0.10.0): export:")
    refused = {**failed, "error": "refused (known_failure): family lfm2 fails in the convert stage"}
    assert verdict(refused, {"convert"}) == ("⊘ refused before any work: convert (litert-torch 0.10.0): family lfm2 "
                                             "fails in the convert stage")
