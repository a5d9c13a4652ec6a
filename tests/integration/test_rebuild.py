"""`farm rebuild SHA`: the recorded bundle made again from its recorded inputs in a clean working
area, by the converter itself (never FARM_EXPORT_CACHE) — MATCH for the session's tiny build; for a local-folder build whose tokenizer.json was
swapped afterwards, DIFFERS naming the tokenizer section and the source file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from farm import export_cache
from farmtest import REPO

pytestmark = pytest.mark.slow


def _poisoned_exports(tmp_path) -> Path:
    """The suite's FARM_EXPORT_CACHE (tests/conftest.py) copied with every kept float export 16 bytes
    longer, its recorded sha256 made to match: bytes a build replays in place of the converter, and
    a rebuild must not (it would compare kept bytes with themselves). Only the tiny models' entries
    (the cache is kept between runs: the real models' are GBs, and this test builds the tiny one)."""
    poisoned = tmp_path / "poisoned-exports"
    poisoned.mkdir()
    for entry in Path(os.environ["FARM_EXPORT_CACHE"]).glob("[!.]*"):
        if export_cache.entry_bytes(entry) <= 64 << 20:
            shutil.copytree(entry, poisoned / entry.name)
    for reply in poisoned.glob("*/reply.json"):
        kept = json.loads(reply.read_text())
        model = reply.parent / "model.tflite"
        with model.open("ab") as f:
            f.write(b"\0" * 16)  # past the flatbuffer's end: it reads the same
        kept["sha256"]["model.tflite"] = hashlib.sha256(model.read_bytes()).hexdigest()
        reply.write_text(json.dumps(kept))
    return poisoned


def test_rebuild_matches_then_names_the_swapped_tokenizer(built, tmp_path, capsys):
    # Under a poisoned export cache: a build in a fresh home replays the poison (its float export is
    # not the session's: the control that the poison is where a build looks); the rebuild still
    # MATCHes, so it ran litert-torch, not the cache.
    poisoned = {}
    if os.environ.get("FARM_EXPORT_CACHE"):
        poisoned = {"FARM_EXPORT_CACHE": str(_poisoned_exports(tmp_path))}
        control = built.farm("build", "examples/tiny-qwen35.yaml", "--no-gates", "--no-bench", "--json",
                             FARM_HOME=str(tmp_path / "control"), **poisoned)
        assert control.returncode == 0, control.stderr[-3000:]
        made = json.loads(control.stdout)["artifact"]["sha256"]
        fe = json.loads(built.farm("lineage", made, "--json", FARM_HOME=str(tmp_path / "control")).stdout)["float_export"]
        ours = json.loads(built.farm("lineage", built.sha256, "--json").stdout)["float_export"]
        assert fe["export_replayed"] and fe["sha256"] != ours["sha256"], (fe, ours)
    proc = built.farm("rebuild", built.sha256, "--json", **poisoned)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["verdict"] == "MATCH" and out["rebuilt_sha256"] == built.sha256
    assert {d["status"] for d in out["sections"]} == {"identical"}

    # A local folder (another model name, so the session's chain is untouched), built, then its
    # tokenizer.json swapped for other bytes with the same tokens.
    src = json.loads(built.farm("lineage", built.sha256, "--json").stdout)["source"]["path"]
    folder = tmp_path / "model"
    shutil.copytree(src, folder)
    cfg = yaml.safe_load((REPO / "examples/tiny-qwen35.yaml").read_text())
    cfg.update(name="tiny-local", source={"kind": "local", "path": str(folder)})
    path = tmp_path / "tiny-local.yaml"
    path.write_text(yaml.safe_dump(cfg))
    made = built.farm("build", str(path), "--no-gates", "--json")
    assert made.returncode == 0, made.stderr[-3000:]
    sha = json.loads(made.stdout)["artifact"]["sha256"]
    tok = folder / "tokenizer.json"
    tok.write_text(json.dumps(json.loads(tok.read_text()), indent=1, ensure_ascii=False))
    proc = built.farm("rebuild", sha[:12], "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["verdict"] == "DIFFERS" and out["rebuilt_sha256"] != sha
    status = {d["type"]: d["status"] for d in out["sections"]}
    assert status["HF_Tokenizer_Zlib"] == "changed" and status["TFLiteModel"] == "identical"
    assert any(w.startswith("source file tokenizer.json") for w in out["why"]), out["why"]
    # The terminal's form of the same verdict (what `farm rebuild` prints without --json; its exit
    # code is the one asserted above): a third rebuild only to print it took ~45 s.
    from farm_cli.building import print_rebuild

    print_rebuild(out)
    text = capsys.readouterr().out
    assert text.startswith("DIFFERS") and "HF_Tokenizer_Zlib" in text and "because source file tokenizer.json" in text


def test_rebuild_refuses_an_import_and_a_non_bundle(built):
    rec = json.loads(built.farm("lineage", built.sha256, "--json").stdout)
    proc = built.farm("rebuild", rec["float_export"]["sha256"])
    assert proc.returncode == 2 and "not a bundle" in proc.stderr
