"""Helpers of the gate tests (tests/integration/test_gates*.py): the shipped configs, a gate run and
a lineage read through the real CLI, a copy of a config with other gate settings, and a bundle with
a known defect packaged from a farm-built file's own model and adopted as built elsewhere."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import yaml

from farmtest import REPO

ALL = {"logits_parity_float", "logits_parity", "generation_parity", "tokenizer_parity", "chat_template",
       "prompt_lengths", "multi_turn", "state_isolation", "metadata"}
TINY = REPO / "examples" / "tiny-qwen35.yaml"
SMOL = REPO / "examples" / "smollm2-135m.yaml"


def lineage(built, sha: str) -> dict:
    proc = built.farm("lineage", sha, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def run_gate(built, sha: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = built.farm("gate", sha, *args, "--json")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc, {r["gate"]: r for r in json.loads(proc.stdout)["results"]}


def config_copy(tmp_path: Path, base: Path, file: str, gates: dict | None = None, **top) -> Path:
    """A copy of a shipped config with other gate settings (and other top-level keys)."""
    raw = yaml.safe_load(base.read_text())
    if gates is not None:
        raw["gates"] = gates
    raw.update(top)
    out = tmp_path / f"{file}.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def package(toolchain_python: str, model_dir: str, tflite: str, out: Path, craft: dict | None = None,
             prefill: int = 8, cache: int = 64) -> Path:
    req = {"model_dir": model_dir, "tflite_path": tflite, "output_path": str(out), "prefill_lengths": [prefill],
           "cache_length": cache, "reproducible_seed": "ab" * 32, **({"craft": craft} if craft else {})}
    proc = subprocess.run([toolchain_python, "-m", "farm_toolchain", "package"], input=json.dumps(req),
                          capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def crafted(built, toolchain_python, tmp_path, rec: dict, craft: dict, source: Path = TINY, **kw) -> str:
    """A bundle with a known defect, packaged from the farm-built file's own model and source, and
    adopted as a file built elsewhere that claims that source."""
    out = tmp_path / f"crafted-{abs(hash(json.dumps(craft, sort_keys=True)))}.litertlm"
    package(toolchain_python, rec["source"]["path"], rec["recipe"]["quantized_model"]["uri"].removeprefix("file://"),
             out, craft, **kw)
    proc = built.farm("import", str(out), "--source", str(source), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["sha256"]


def api(url: str, path: str) -> dict:
    with urllib.request.urlopen(f"{url}{path}", timeout=10) as r:
        return json.loads(r.read())
