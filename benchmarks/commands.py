"""What a command costs on the embedded default: the tiny model's cold build, its no-op rebuild
(every stage cached, gate results reused) through the farm's background Prefect server and through
Prefect's temporary per-command server, and the wall time of `farm lineage SHA` (a command that
runs no flow). Ratios are within one run (these machines are noisy).

    .venv/bin/python benchmarks/commands.py [--repeats 3] [--json]

Targets (issue: operations): no-op rebuild <= 5 % of the cold build's wall time, both through the
local server; `farm lineage` <= 1.5 s wall.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FARM = [sys.executable, "-m", "farm_cli"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_farm(prefix: str) -> tuple[Path, dict[str, str]]:
    """A fresh FARM_HOME and the environment of a farm command on it: its own local Prefect server
    port, the caller's FARM_CACHE (generated models, toolchain envs) kept, nothing else of FARM_*
    or PREFECT_*."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "PREFECT_"))}
    env.update(FARM_HOME=str(home), FARM_PREFECT_PORT=str(_port()))
    if os.environ.get("FARM_CACHE"):
        env["FARM_CACHE"] = os.environ["FARM_CACHE"]
    return home, env


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(FARM + args, env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"farm {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return wall, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    _home, env = fresh_farm("farm-cmd-bench-")
    build = ["build", "examples/tiny-qwen35.yaml", "--json"]
    try:
        _timed(["server", "start"], env)  # started once, as the first command of a session would
        cold, proc = _timed(build, env)
        sha = json.loads(proc.stdout)["artifact"]["sha256"]
        noop = [_timed(build, env)[0] for _ in range(args.repeats)]
        noop_nogates = [_timed(build + ["--no-gates"], env)[0] for _ in range(args.repeats)]
        temp_env = {**env, "FARM_PREFECT_SERVER": "temporary"}
        noop_temp = [_timed(build + ["--no-gates"], temp_env)[0] for _ in range(args.repeats)]
        lineage = [_timed(["lineage", sha], env)[0] for _ in range(args.repeats)]
    finally:
        subprocess.run(FARM + ["server", "stop"], env=env, cwd=REPO, capture_output=True)
    med = statistics.median
    row = {
        "cold_build_s": round(cold, 1),
        "noop_rebuild_s": round(med(noop), 2), "noop_ratio": round(med(noop) / cold, 3),
        "noop_rebuild_no_gates_s": round(med(noop_nogates), 2),
        "noop_ratio_no_gates": round(med(noop_nogates) / cold, 3),
        "noop_rebuild_no_gates_temporary_server_s": round(med(noop_temp), 2),
        "lineage_command_s": round(med(lineage), 2),
    }
    if args.json:
        print(json.dumps(row))
    else:
        for k, v in row.items():
            print(f"{k:<42} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
