"""`kill -9` of the farm and its toolchain child mid-convert and mid-gate: the rerun reproduces the
clean sha256, no temp file or scratch folder remains, nothing is orphaned in the store, and the
killed run's Prefect flow run is marked Crashed by the next farm process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from farmtest import CONVERTER_RUNS, REPO, farm_env, run_farm
from farm.leftovers import owner_tag

pytestmark = pytest.mark.slow


def _kill_when(args: list[str], env: dict[str, str], needle: str, timeout: float = 300) -> int:
    """Start the farm in its own process group; SIGKILL the group (farm + toolchain server) as soon
    as its log shows `needle`. Returns the killed farm's pid. `-v`: the toolchain's lines are on the
    terminal only when verbose (otherwise in the log file)."""
    proc = subprocess.Popen([sys.executable, "-m", "farm_cli", "-v", *args], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = threading.Event()

    def watch() -> None:
        for line in proc.stderr:
            if needle in line:
                seen.set()
                return

    threading.Thread(target=watch, daemon=True).start()
    assert seen.wait(timeout), f"never saw {needle!r}"
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return proc.pid


def _leftovers(home: Path) -> list[str]:
    work = home / "work"
    tmp = home / "store" / "tmp"
    return [str(p) for d in (work, tmp) if d.exists() for p in d.iterdir()]


def _run_state(api: str, pid: int) -> str:
    """The state of the top-level flow run the farm process `pid` of this host owned (its owner tag
    is `farm-owner:<host>.<pid>-<nonce>`)."""
    body = json.dumps({"flow_runs": {"parent_task_run_id": {"is_null_": True}}, "sort": "START_TIME_DESC",
                       "limit": 200}).encode()
    req = urllib.request.Request(f"{api}/flow_runs/filter", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        runs = json.loads(r.read())
    mine = f"farm-owner:{owner_tag().rsplit('.', 1)[0]}.{pid}-"
    states = [r["state"]["type"] for r in runs if any(t.startswith(mine) for t in r["tags"])]
    return states[0] if states else "none"


def test_kill_mid_convert_and_mid_gate_then_the_rerun_is_clean(built, tmp_path, prefect_server):
    home = tmp_path / "home"
    env = farm_env(home, prefect_server, **CONVERTER_RUNS)  # the kill lands in litert-torch's export
    build = ["build", "examples/tiny-qwen35.yaml", "--json", "--no-bench"]

    killed = _kill_when(build, env, "Export text prefill-decode model")
    assert _run_state(prefect_server, killed) == "RUNNING"  # nobody told the server it died
    proc = run_farm(build, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["artifact"]["sha256"] == built.sha256  # the clean build's bytes
    assert _run_state(prefect_server, killed) == "CRASHED"
    assert _leftovers(home) == []

    # Mid-gate: a fresh measurement (another threshold) killed while prompt_lengths runs.
    cfg = tmp_path / "c.yaml"
    cfg.write_text((REPO / "examples" / "tiny-qwen35.yaml").read_text() + "  prompt_lengths: {tie_margin: 0.02}\n")
    killed = _kill_when(["build", str(cfg), "--json", "--no-bench"], env, "Task run 'prompt_lengths")
    proc = run_farm(["build", str(cfg), "--json", "--no-bench"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["artifact"]["sha256"] == built.sha256
    assert {g["gate"]: g["status"] for g in out["gates"]}["prompt_lengths"] == "pass"
    assert _run_state(prefect_server, killed) == "CRASHED"
    assert _leftovers(home) == []
    scrub = json.loads(run_farm(["store", "verify", "--json"], env).stdout)
    assert scrub["orphaned"] == [] and scrub["missing"] == [] and scrub["corrupt"] == []
