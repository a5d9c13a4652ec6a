"""A process worker killed with its run mid-benchmark (kill -9 of the worker and everything under
it: a host that died): the bench-one run ends Crashed (Prefect's zombie automation, which
`deploy-devices` keeps), the parent's device row says why, the device's global concurrency slot
comes free, and a re-run through a new worker verifies the device."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farmtest import REPO, stop

pytestmark = pytest.mark.slow

DEVICE = "local-doomed"


def _registry(path: Path, runs: int) -> None:
    path.write_text(
        f"defaults:\n  protocol: {{prefill_tokens: 16, decode_tokens: 16, runs: {runs}, cache_mode: 'no', timeout_s: 600}}\n"
        f"devices:\n  - {{id: {DEVICE}, name: a worker that dies, accelerators: [cpu], runner: {{kind: local}}, "
        f"work_pool: farm-doomed, work_queue: {DEVICE}}}\n")


def _tree(root: int) -> list[int]:
    """root and every process under it (by parent pid, from /proc)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", "farm-doomed", "--type", "process"],
        env=env, cwd=REPO, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


def test_a_worker_killed_with_its_run_crashes_the_run_frees_the_slot_and_a_rerun_verifies(built, tmp_path):
    import httpx

    api = built.env["PREFECT_API_URL"]
    reg = tmp_path / "devices.yaml"
    _registry(reg, runs=5000)  # minutes of benchmarking: the kill lands mid-run
    env = {**built.env, "FARM_DEVICES_FILE": str(reg), "PREFECT_WORKER_QUERY_SECONDS": "1",
           "FARM_ZOMBIE_AFTER_S": "45"}
    proc = built.farm("deploy-devices", "--device", DEVICE, FARM_DEVICES_FILE=str(reg), FARM_ZOMBIE_AFTER_S="45")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = tmp_path / "worker.log"
    worker = _worker(env, log)
    bench = subprocess.Popen([sys.executable, "-m", "farm_cli", "bench", built.sha256, "--workers", "--device", DEVICE,
                              "--json"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Wait until the device's benchmark itself runs under the worker (the wrapper's child).
        deadline = time.monotonic() + 240
        while not any("litert" in Path(f"/proc/{p}/cmdline").read_text(errors="replace").replace("\0", " ")
                      and "benchmark" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
                      for p in _tree(worker.pid)[1:] if Path(f"/proc/{p}").exists()):
            assert worker.poll() is None and bench.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the benchmark never started under the worker: " + log.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(2)
        doomed = _tree(worker.pid)
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed_at = time.monotonic()
        worker.wait(timeout=10)
        out, err = bench.communicate(timeout=400)
    finally:
        if bench.poll() is None:
            bench.kill()
        if worker.poll() is None:
            worker.kill()
    waited = time.monotonic() - killed_at
    assert bench.returncode == 1, err[-3000:]
    (rec,) = json.loads(out)["records"]
    assert rec["status"] == "failed" and rec["failure_class"] == "device_error", rec
    assert rec["env"]["state"] == "Crashed" and "no heartbeat" in rec["env"]["state_message"], rec["env"]
    assert any("Crashed" in ln and "worker running it" in ln for ln in rec["evidence"]), rec["evidence"]
    # Ended by the automation (45 s without a heartbeat; they come every 30 s), not the parent's
    # 900 s wait.
    assert waited < 200, f"the parent waited {waited:.0f} s"
    run = httpx.get(f"{api}/flow_runs/{rec['env']['child_flow_run']}", timeout=10).json()
    assert run["state_type"] == "CRASHED"
    # Nothing of the killed run is left running on this host.
    assert not [p for p in doomed if Path(f"/proc/{p}").exists()
                and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]

    # The re-run: a new worker, a short protocol. It takes the device's slot, which the dead run's
    # lease held until it lapsed (60 s without renewal).
    _registry(reg, runs=2)
    worker = _worker(env, log)
    try:
        proc = subprocess.run([sys.executable, "-m", "farm_cli", "bench", built.sha256, "--workers", "--device", DEVICE,
                               "--json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    finally:
        stop(worker)
    assert proc.returncode == 0, proc.stderr[-3000:] + log.read_text()[-3000:]
    (rec,) = json.loads(proc.stdout)["records"]
    assert rec["status"] == "verified" and rec["runs"] == 2
    # A device of the host's own (runner local) has one slot per host (flows/tasks/common.py:slot_name).
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:60]
    limit = httpx.get(f"{api}/v2/concurrency_limits/device-{DEVICE}-on-{host}", timeout=10).json()
    assert limit["active_slots"] == 0, limit
