"""One flipped byte in a stored bundle: lineage warns, gates and bench refuse it as a store error,
a build heals it (the stage runs again, the corrupt object goes to quarantine), and `farm store
verify [--repair]` finds it. Real processes on a copy of the session's farm."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from farmtest import run_farm

pytestmark = pytest.mark.slow


def _obj(home: Path, sha: str) -> Path:
    return home / "store" / "sha256" / sha[:2] / sha[2:4] / sha


def _flip(path: Path, at: int = 1000) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))


@pytest.fixture
def farm_copy(built, tmp_path):
    """The session farm's lineage DB and store (hard links: cheap), with the bundle's own object a
    real copy, so flipping it does not touch the session's farm."""
    home = tmp_path / "home"
    home.mkdir()
    import sqlite3

    # The backup API, not a file copy: the DB is in WAL mode, its newest pages live in lineage.db-wal.
    with sqlite3.connect(built.home / "lineage.db") as src, sqlite3.connect(home / "lineage.db") as dst:
        src.backup(dst)
    subprocess.run(["cp", "-al", str(built.home / "store"), str(home / "store")], check=True)
    obj = _obj(home, built.sha256)
    data = obj.read_bytes()
    obj.unlink()
    obj.write_bytes(data)
    shutil.rmtree(home / "store" / "verified", ignore_errors=True)
    env = {**built.env, "FARM_HOME": str(home)}
    return home, env


def test_a_flipped_byte_is_reported_refused_healed_and_scrubbed(built, farm_copy):
    home, env = farm_copy
    sha = built.sha256
    _flip(_obj(home, sha))

    proc = run_farm(["lineage", sha], env)
    assert proc.returncode == 0 and "WARNING    the recorded object is corrupt" in proc.stdout
    assert json.loads(run_farm(["lineage", sha, "--json"], env).stdout)["store"]["status"] == "corrupt"

    for args in (["gate", sha, "--gate", "metadata"], ["bench", sha]):
        proc = run_farm(args, env)
        assert proc.returncode == 1, proc.stderr[-2000:]
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "corrupt" in errors[0], proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr and "device_error" not in proc.stdout

    proc = run_farm(["store", "verify", "--json"], env)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and sha in [c["sha256"] for c in out["corrupt"]]
    env["_OTHERS"] = " ".join(x["sha256"] for x in out["missing"] + out["corrupt"] if x["sha256"] != sha)

    # A build heals it: the cached package output does not verify, so it is quarantined and remade.
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--json", "--no-gates", "--no-bench"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = json.loads(proc.stdout)
    assert build["artifact"]["sha256"] == sha
    assert {s["name"]: s["status"] for s in build["stages"]}["package"] == "ran"
    assert len(list((home / "store" / "quarantine").glob(f"{sha}.*"))) == 1
    assert _bad(env) == set()

    # --repair moves a corrupt object aside and drops the cache rows that point at it.
    _flip(_obj(home, sha), at=5000)
    proc = run_farm(["store", "verify", "--repair", "--json"], env)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and sha in [m["sha256"] for m in out["missing"]]
    assert any(r.get("action") == "quarantined" and r["sha256"] == sha for r in out["repaired"])
    assert any("stage cache rows dropped" in str(r.get("action")) for r in out["repaired"])
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--json", "--no-gates", "--no-bench"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _bad(env) == set() and os.access(_obj(home, sha), os.R_OK)


def _bad(env) -> set[str]:
    """Objects `store verify` finds missing or corrupt (other tests of the session may have deleted
    objects of their own on purpose: only this test's are asserted on)."""
    out = json.loads(run_farm(["store", "verify", "--json"], env).stdout)
    return {x["sha256"] for x in out["missing"] + out["corrupt"]} - {*env.get("_OTHERS", "").split()}
