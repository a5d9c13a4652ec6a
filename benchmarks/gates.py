"""Time of the full gate suite on one model, and which gates dominate it.

    .venv/bin/python benchmarks/gates.py [--config examples/tiny-qwen35.yaml] [--json]

Builds the config without gates in a fresh FARM_HOME (FARM_CACHE is reused), then times
`farm gate SHA` end to end (every gate the config enables) and reads each gate's own start/finish
from lineage. `sum_of_first_8_s` sums the eight gates that existed before chat_template, questions-
by-default and arithmetic, so figures from before and after the gate refactor compare like for like.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def farm(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "farm_cli", *args], env=env, cwd=REPO, capture_output=True, text=True)
    return time.monotonic() - t0, proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "examples" / "tiny-qwen35.yaml"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="farm-gates-bench-"))
    env = {**os.environ, "FARM_HOME": str(tmp / "home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    try:
        _, proc = farm(["build", args.config, "--json", "--no-gates"], env)
        if proc.returncode != 0:
            sys.exit(f"build failed:\n{proc.stderr[-3000:]}")
        sha = json.loads(proc.stdout)["artifact"]["sha256"]
        wall, proc = farm(["gate", sha, "--json"], env)
        if proc.returncode not in (0, 1):
            sys.exit(f"gate failed to run:\n{proc.stderr[-3000:]}")
        _, lin = farm(["lineage", sha, "--json"], env)
        gates = json.loads(lin.stdout)["gates"]
        per_gate = {
            g["gate"]: round((datetime.fromisoformat(g["finished_at"]) - datetime.fromisoformat(g["started_at"])).total_seconds(), 2)
            for g in gates
        }
        first8 = ("logits_parity_float", "logits_parity", "generation_parity", "tokenizer_parity",
                  "prompt_lengths", "multi_turn", "state_isolation", "metadata")
        figures = {
            "config": Path(args.config).name,
            "suite_wall_s": round(wall, 2),
            "sum_of_gates_s": round(sum(per_gate.values()), 2),
            "sum_of_first_8_s": round(sum(v for k, v in per_gate.items() if k in first8), 2),
            "per_gate_s": dict(sorted(per_gate.items(), key=lambda kv: -kv[1])),
            "statuses": {g["gate"]: g["status"] for g in gates},
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures, indent=2) if args.json else "\n".join(f"{k:<16} {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
