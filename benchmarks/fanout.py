"""Fan-out parallelism on 3 local "devices" (3 registry entries that all run this host's CPU).

    .venv/bin/python benchmarks/fanout.py [--json]

Builds the tiny Qwen3.5 (no gates, no bench) in a fresh FARM_HOME, benchmarks it on each device alone,
then on all three in one fan-out. From lineage timestamps: each device's run time alone, the fan-out
span (first start to last finish), and the ratio span / slowest alone (1.0 = perfect overlap, 3.0 =
serial). Three CPU-bound runs on a 2-core host cannot all overlap, so the ratio also shows the host.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEVICES = ("local-a", "local-b", "local-c")


def farm(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "farm_cli", *args], env=env, cwd=REPO, capture_output=True, text=True)


def rows(sha: str, env: dict[str, str]) -> list[dict]:
    return json.loads(farm(["lineage", sha, "--json"], env).stdout)["devices"]


def span(rs: list[dict]) -> float:
    t0 = min(datetime.fromisoformat(r["started_at"]) for r in rs)
    t1 = max(datetime.fromisoformat(r["finished_at"]) for r in rs)
    return (t1 - t0).total_seconds()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="farm-fanout-bench-"))
    reg = tmp / "devices.yaml"
    reg.write_text(
        "defaults:\n  protocol: {prefill_tokens: 16, decode_tokens: 16, runs: 3, cache_mode: 'no'}\ndevices:\n"
        + "".join(f"  - {{id: {d}, name: {d}, accelerators: [cpu], runner: {{kind: local}}}}\n" for d in DEVICES)
    )
    env = {**os.environ, "FARM_HOME": str(tmp / "home"), "FARM_DEVICES_FILE": str(reg),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    try:
        b = farm(["build", str(REPO / "examples" / "tiny-qwen35.yaml"), "--json", "--no-gates", "--no-bench"], env)
        if b.returncode != 0:
            sys.exit(b.stderr[-3000:])
        sha = json.loads(b.stdout)["artifact"]["sha256"]
        alone = {}
        for d in DEVICES:
            farm(["bench", sha, "--device", d], env)
            r = [x for x in rows(sha, env) if x["device_id"] == d][-1]
            alone[d] = span([r])
        n_before = len(rows(sha, env))
        farm(["bench", sha, *sum((["--device", d] for d in DEVICES), [])], env)
        fan = [r for r in rows(sha, env)[n_before:] if r["device_id"] in DEVICES]
        figures = {
            "alone_s": {k: round(v, 3) for k, v in alone.items()},
            "fanout_span_s": round(span(fan), 3),
            "slowest_alone_s": round(max(alone.values()), 3),
            "parallelism_ratio": round(span(fan) / max(alone.values()), 3),
            "serial_would_be_s": round(sum(alone.values()), 3),
            "cores": os.cpu_count(),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures, indent=2) if args.json else "\n".join(f"{k:<20} {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
