"""Soak: N consecutive builds of varied configs through one background Prefect server (the embedded
default), watching the server and the runner (`flows.serve`) for growth in open files, threads and
resident memory. Figures, not a test (see benchmarks/README.md, "Soak").

Configs cycle through the tiny Qwen3.5 and the tiny Llama with three recipes, with and without gates
and devices, so the run mixes cold stages, new recipes over a cached export and no-op rebuilds.

    .venv/bin/python benchmarks/soak.py [--builds 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commands import FARM, REPO, fresh_farm  # noqa: E402  (benchmarks/commands.py)

CYCLE = [
    ["examples/tiny-qwen35.yaml"],
    ["examples/tiny-llama.yaml", "--no-bench"],
    ["examples/tiny-qwen35.yaml", "-r", "weight_only_wi8"],
    ["examples/tiny-qwen35.yaml", "--no-gates"],
    ["examples/tiny-llama.yaml", "-r", "weight_only_wi8", "--no-gates"],
    ["examples/tiny-qwen35.yaml", "-r", "dynamic_wi4_b32", "--no-bench"],
    ["examples/tiny-qwen35.yaml"],
]


def _tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                kids.setdefault(int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _usage(pid: int) -> dict[str, int]:
    """The process and everything under it: resident MB, threads, open file descriptors, processes."""
    rss_kb = threads = fds = procs = 0
    for p in _tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            rss_kb += int(fields.get("VmRSS", "0 kB").split()[0])
            threads += int(fields["Threads"])
            fds += len(os.listdir(f"/proc/{p}/fd"))
            procs += 1
        except (OSError, KeyError, ValueError):
            pass
    return {"rss_mb": rss_kb // 1024, "threads": threads, "fds": fds, "processes": procs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    home, env = fresh_farm("farm-soak-")
    rows = []
    try:
        subprocess.run(FARM + ["server", "start"], env=env, cwd=REPO, check=True, capture_output=True)
        pids = {w: int((home / "prefect" / f"{w}.pid").read_text()) for w in ("server", "runner")}
        rows.append({"build": 0, "config": "(server started)", "seconds": 0.0, "rc": 0,
                     **{w: _usage(p) for w, p in pids.items()}})
        for i in range(args.builds):
            cfg = CYCLE[i % len(CYCLE)]
            t0 = time.perf_counter()
            proc = subprocess.run(FARM + ["build", *cfg, "--json"], env=env, cwd=REPO, capture_output=True, text=True)
            took = time.perf_counter() - t0
            if proc.returncode not in (0, 1):  # 1: a gate failed, the build itself went through
                raise SystemExit(f"build {i + 1} ({' '.join(cfg)}) failed ({proc.returncode}): {proc.stderr[-1500:]}")
            time.sleep(2)  # the runner and server settle (event and log flushes) before reading them
            rows.append({"build": i + 1, "config": " ".join(cfg), "seconds": round(took, 1), "rc": proc.returncode,
                         **{w: _usage(p) for w, p in pids.items()}})
            if not args.json:
                r = rows[-1]
                print(f"{i + 1:>3} {took:6.1f}s rc={proc.returncode} server {r['server']} runner {r['runner']}  "
                      f"{' '.join(cfg)}", flush=True)
    finally:
        subprocess.run(FARM + ["server", "stop"], env=env, cwd=REPO, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    # Growth from after the first build (imports and caches warm) to the last.
    first, last = rows[1], rows[-1]
    summary = {w: {k: {"after_first": first[w][k], "last": last[w][k], "max": max(r[w][k] for r in rows[1:])}
                   for k in first[w]} for w in ("server", "runner")}
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}))
    else:
        for w, figs in summary.items():
            print(w, "  ".join(f"{k} {v['after_first']} -> {v['last']} (max {v['max']})" for k, v in figs.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
