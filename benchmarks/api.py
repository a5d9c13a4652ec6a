"""Lineage over HTTP: p50/p99 of `GET /artifacts/{8-digit prefix}` against the real service
(uvicorn on loopback, one keep-alive httpx client, as a dashboard would call it) on lineage seeded
with 100,000 artifacts, on PostgreSQL and SQLite; and the same lookup in-process, so the HTTP cost
is a ratio within one run.

    .venv/bin/python benchmarks/api.py [--artifacts 100000] [--db postgresql sqlite] [--lookups 300] [--json]

Target (issue: lineage over HTTP): p99 under 20 ms at 100,000 artifacts in PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from farm.api import make_app  # noqa: E402
from farm.lineage.report import lineage_record  # noqa: E402
from farm.store.local import LocalStore  # noqa: E402
from lineage import seed_and_analyze, throwaway_database  # noqa: E402  (benchmarks/lineage.py: the same realistic shape)


def _pct(times: list[float]) -> dict:
    times = sorted(times[10:])  # the first lookups warm the caches
    return {"p50_ms": round(statistics.median(times), 2), "p99_ms": round(times[int(len(times) * 0.99) - 1], 2)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(kind: str, n: int, lookups: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="farm-api-bench-"))
    with throwaway_database(kind) as db:
        bundles = seed_and_analyze(db, n)
        res = SimpleNamespace(db=db, store=LocalStore(tmp / "store"))
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(make_app(res), host="127.0.0.1", port=port, log_level="warning",
                                               access_log=False))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        rng = random.Random(0)
        prefixes = [rng.choice(bundles)[:8] for _ in range(lookups)]
        http, direct = [], []
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            for p in prefixes:
                t0 = time.perf_counter()
                r = client.get(f"/artifacts/{p}")
                http.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
        for p in prefixes:
            t0 = time.perf_counter()
            lineage_record(res, p)
            direct.append((time.perf_counter() - t0) * 1000)
        server.should_exit = True
        thread.join(timeout=10)
        h, d = _pct(http), _pct(direct)
        return {"db": kind, "artifacts": len(bundles) * 3, "http_p50_ms": h["p50_ms"], "http_p99_ms": h["p99_ms"],
                "inprocess_p50_ms": d["p50_ms"], "inprocess_p99_ms": d["p99_ms"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifacts", type=int, default=100_000)
    ap.add_argument("--db", nargs="+", default=["postgresql", "sqlite"], choices=["sqlite", "postgresql"])
    ap.add_argument("--lookups", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for kind in args.db:
        row = run(kind, args.artifacts, args.lookups)
        print(json.dumps(row) if args.json else
              f"{kind:<10} {row['artifacts']:>9,} artifacts  HTTP p50 {row['http_p50_ms']:6.2f} ms  p99 "
              f"{row['http_p99_ms']:6.2f} ms   in-process p50 {row['inprocess_p50_ms']:6.2f} ms  p99 "
              f"{row['inprocess_p99_ms']:6.2f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
