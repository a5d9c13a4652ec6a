"""SIGINT and SIGTERM to a build mid-convert: one line on the terminal (`interrupted`, `terminated
(SIGTERM)`), exit 130 / 143, the flow run and its convert task end Crashed (nothing left Running),
no toolchain process outlives the farm, and the next build completes. Before the SIGTERM handler
the default action killed the process silently with 143 (issue 19)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from farmtest import CONVERTER_RUNS, REPO, farm_env, run_farm
from farm.leftovers import owner_tag

pytestmark = pytest.mark.slow

TINY_LLAMA = REPO / "examples" / "tiny-llama.yaml"


def _post(api: str, path: str, body: dict) -> list[dict]:
    req = urllib.request.Request(f"{api}/{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _children(pid: int) -> set[int]:
    """Every process below `pid` (from /proc: no psutil here)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parent.items() if pp == p}
        todo.extend(kids - out)
        out |= kids
    return out


@pytest.mark.parametrize("sig, code, line", [(signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_a_signal_mid_convert_is_one_line_and_leaves_nothing_running(tmp_path, prefect_server, toolchain_python,
                                                                      sig, code, line):
    env = farm_env(tmp_path / "home", prefect_server, **CONVERTER_RUNS)  # the signal lands mid-export
    # The terminal as a user sees it (no -v): a line per finished stage; the convert follows the source.
    proc = subprocess.Popen([sys.executable, "-m", "farm_cli", "build", str(TINY_LLAMA), "--no-gates",
                             "--no-bench"], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            # a background shell starts its children ignoring SIGINT: undo that
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    started = threading.Event()

    def watch() -> None:
        for text in proc.stderr:
            lines.append(text)
            if "stage  source" in text:
                started.set()

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    assert started.wait(300), "".join(lines[-20:])
    time.sleep(4)  # into the export (the tiny model's takes ~15 s)
    below = _children(proc.pid)
    assert below, "the toolchain process is a child of the farm"
    proc.send_signal(sig)  # the farm process alone, as `kill` sends it (not the process group)
    assert proc.wait(timeout=120) == code, "".join(lines[-20:])
    reader.join(timeout=10)
    assert lines[-1].strip().startswith(line), lines[-5:]
    assert not any("Traceback" in t for t in lines)
    api = env["PREFECT_API_URL"]
    tag = f"farm-owner:{owner_tag().rsplit('.', 1)[0]}.{proc.pid}-"  # host.pid-nonce (farm/leftovers.py)
    mine = [r for r in _post(api, "flow_runs/filter", {"sort": "START_TIME_DESC", "limit": 200})
            if r.get("parent_task_run_id") is None and any(t.startswith(tag) for t in r["tags"])]
    assert mine and {r["state_type"] for r in mine} == {"CRASHED"}, [r["state_type"] for r in mine]
    tasks = _post(api, "task_runs/filter", {"flow_runs": {"id": {"any_": [r["id"] for r in mine]}}})
    convert = [t for t in tasks if t["name"].startswith("convert")]
    assert convert and all(t["state_type"] == "CRASHED" for t in convert), [(t["name"], t["state_type"]) for t in tasks]
    # The toolchain child (mid-export) went with the farm.
    alive = [p for p in below if os.path.exists(f"/proc/{p}")]
    assert not alive, alive
    again = run_farm(["build", str(TINY_LLAMA), "--no-gates", "--no-bench", "--json"], env)
    assert again.returncode == 0, again.stderr[-2000:]
