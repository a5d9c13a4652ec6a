"""Helpers of the family tests (tests/integration/test_families_*.py): a farm home shared by a test
file in which each family's tiny model is built once at float32 (every stage and gate, no device),
and what the family itself declares it should come to (its KnownFailure entries)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from farmtest import REPO, farm_env, run_farm
from farmtest.gates import ALL

CONFIGS = REPO / "examples" / "families"


class FamilyHome:
    """One FARM_HOME per test file; `build(family)` builds that family's tiny model once."""

    def __init__(self, home: Path, prefect_url: str):
        self.home, self.env = home, farm_env(home, prefect_url)
        self._built: dict[tuple[str, str], tuple[subprocess.CompletedProcess, dict]] = {}

    def farm(self, *args: str, **extra: str) -> subprocess.CompletedProcess:
        return run_farm(list(args), {**self.env, **extra})

    def build(self, family: str, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
        key = (family, " ".join(flags))
        if key not in self._built:
            proc = self.farm("build", str(CONFIGS / f"tiny-{family}.yaml"), "--recipe", "float32", "--no-bench",
                             "--json", *flags)
            self._built[key] = (proc, json.loads(proc.stdout) if proc.stdout.strip() else {})
        return self._built[key]

    def matrix_row(self, family: str) -> dict:
        proc = self.farm("families", "--json")
        assert proc.returncode == 0, proc.stderr[-2000:]
        return next(e for e in json.loads(proc.stdout)["families"] if e["family"] == family)


def declared_gate_failures(family: str) -> set[str]:
    """The gates the family says fail (measured, farm/families/<family>.py known_failures)."""
    from farm.families import get_family

    return {k.where for k in get_family(family).known_failures if k.where in ALL}


def declared_stage_failure(family: str):
    from farm.families import get_family

    return next((k for k in get_family(family).known_failures if k.where not in ALL), None)


def check_build(fh: FamilyHome, family: str) -> dict:
    """The family's tiny model through every stage and gate at float32: what its module declares is
    what happens (a known stage failure refused before any work and on record; otherwise a bundle
    with every gate recorded, exactly the declared gates failing, the model type the family needs,
    and the matrix row from lineage). Returns the build summary ({} when refused)."""
    from farm.families import get_family

    stage = declared_stage_failure(family)
    proc, summary = fh.build(family)
    if stage is not None:
        assert proc.returncode == 2, proc.stderr[-3000:]
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and (f"refused (known_failure): family {family} fails in the {stage.where} stage "
                                     f"with {stage.tool}") in errors[0], proc.stderr[-2000:]
        cell = fh.matrix_row(family)["float"]
        assert cell["outcome"] == "failed" and cell["stage"] == stage.where and cell["error"].startswith("refused")
        return {}
    expected = declared_gate_failures(family)
    assert proc.returncode == (1 if expected else 0), proc.stderr[-3000:]
    gates = {g["gate"]: g for g in summary["gates"]}
    assert set(gates) == ALL
    failing = {g for g, r in gates.items() if r["status"] in ("fail", "could_not_run")}
    assert failing == expected, {g: gates[g]["findings"][:1] for g in failing}
    meta = gates["metadata"]["evidence"]
    assert f"PASS model_type: llm_model_type is {get_family(family).llm_model_type}, the family's" in meta, meta
    assert any(e.startswith("PASS blank_stops") for e in meta) and any(e.startswith("PASS stop_tokens") for e in meta)
    cell = fh.matrix_row(family)["float"]
    assert cell["outcome"] == "bundle" and cell["sha256"] == summary["artifact"]["sha256"]
    assert cell["litert_torch"] and cell["litert_lm"]
    return summary


def metadata_controls(family: str) -> list[tuple[dict, str]]:
    """(craft, the one check it must fail) for what is special in the family's metadata."""
    from farm.families import get_family

    f = get_family(family)
    out = []
    if f.end_of_turn != "<|im_end|>":
        out.append(({"stop_tokens": [0]}, f"FAIL stop_tokens: no stop token is the end-of-turn token {f.end_of_turn!r}"))
    if f.llm_model_type != "generic_model":
        out.append(({"llm_model_type": "generic_model"},
                    f"FAIL model_type: llm_model_type is generic_model, the family needs {f.llm_model_type}"))
    return out


def check_metadata_controls(fh: FamilyHome, family: str, summary: dict, toolchain_python: str, tmp_path: Path) -> None:
    """Negative controls on the family's own bundle: its end-of-turn token left out of the stop
    tokens (every family whose turns are not ChatML's: the tiny Qwen3.5's covers ChatML), and its
    model type written as generic_model (every family the runtime knows by name: litert-torch
    #1005) each fail the metadata gate, on that check alone."""
    from farmtest.gates import crafted, lineage, run_gate

    rec = lineage(fh, summary["artifact"]["sha256"])
    crafts = metadata_controls(family)
    assert crafts, f"{family}: no family-specific metadata to control"
    for craft, check in crafts:
        sha = crafted(fh, toolchain_python, tmp_path, rec, craft, source=CONFIGS / f"tiny-{family}.yaml")
        proc, res = run_gate(fh, sha, "--gate", "metadata")
        assert proc.returncode == 1 and res["metadata"]["status"] == "fail", (craft, proc.stderr[-1500:])
        failed = [e for e in res["metadata"]["evidence"] if e.startswith("FAIL")]
        assert any(e.startswith(check) for e in failed), (craft, failed)
        assert all(e.split(":")[0] in ("FAIL stop_tokens", "FAIL source_stops", "FAIL model_type") for e in failed)


def check_family(fh: FamilyHome, family: str, toolchain_python: str, tmp_path: Path) -> None:
    """One test per family: its build as its module declares, then (where its metadata is special
    and it built) the crafted negative controls on the same bundle."""
    summary = check_build(fh, family)
    if summary and metadata_controls(family):
        check_metadata_controls(fh, family, summary, toolchain_python, tmp_path)
