"""Lineage served to many clients at once: `farm api` (the real command, its own process) on lineage
seeded with 100,000 artifacts, driven by closed-loop keep-alive clients with the mix a dashboard
and scripted users make: 60 % lookups by an 8-digit prefix, 35 % by full sha256, 5 % the newest-20
listing (`/artifacts?limit=20`). Then the same at the most clients while two builds write (each a
process replaying a build's lineage writes: its three artifacts, sections, eight gate results and a
device result, one transaction per stage as the stages commit them; no conversion, so the figure is
about the database's locks, not the CPU a real export takes).

    .venv/bin/python benchmarks/load.py [--artifacts 100000] [--db sqlite postgresql]
        [--clients 1 10 50] [--seconds 30] [--no-writers] [--json]

Targets (issue 19, this 2-core machine): at 50 clients >= 400 requests/s and p99 <= 250 ms, the
listing <= 20 ms (p50, with 1 client), 0 errors; while builds write, no write transaction waits
over 1 s. The clients are asyncio streams in this process (a few tens of microseconds a request),
so most of the machine is left to the server; figures are per run, on a noisy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqlalchemy import insert  # noqa: E402

from farm.lineage.db import Database  # noqa: E402
from farm.lineage.models import Artifact, ArtifactInput, Section  # noqa: E402
from farm.lineage.record import record_device_result, record_gate_result  # noqa: E402
from lineage import h, seed_and_analyze, throwaway_database  # noqa: E402  (benchmarks/lineage.py)

REPO = Path(__file__).resolve().parents[1]
MIX = (("prefix", 0.60), ("full", 0.35), ("list", 0.05))
WORKERS = 0  # farm api --workers (0: its default)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _path(kind: str, rng: random.Random, bundles: list[str]) -> str:
    if kind == "list":
        return "/artifacts?limit=20"
    sha = rng.choice(bundles)
    return f"/artifacts/{sha[:8] if kind == 'prefix' else sha}"


def _pick(rng: random.Random) -> str:
    x, acc = rng.random(), 0.0
    for kind, share in MIX:
        acc += share
        if x < acc:
            return kind
    return MIX[-1][0]


async def _client(port: int, bundles: list[str], seed: int, until: float, out: list, errors: list,
                  only: str | None, paths: list) -> None:
    """One keep-alive HTTP/1.1 connection, one request at a time (closed loop)."""
    rng = random.Random(seed)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            kind = only or _pick(rng)
            path = _path(kind, rng, bundles)
            t0 = time.perf_counter()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            out.append((kind, (time.perf_counter() - t0) * 1000))
            paths.append(path)
            if status != 200:
                errors.append(f"{status} {path}")
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        errors.append(f"connection: {exc}")
    finally:
        writer.close()


async def _drive(port: int, bundles: list[str], clients: int, seconds: float, only: str | None = None) -> dict:
    out: list[tuple[str, float]] = []
    errors: list[str] = []
    paths: list[str] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_client(port, bundles, i, t0 + seconds, out, errors, only, paths) for i in range(clients)))
    wall = time.perf_counter() - t0
    lat = sorted(ms for _k, ms in out)
    pct = (lambda xs, q: round(xs[min(len(xs) - 1, int(len(xs) * q))], 1)) if lat else (lambda xs, q: None)
    by_kind = {k: sorted(ms for kk, ms in out if kk == k) for k, _ in MIX}
    repeats = len(out) - len(set(paths))
    return {"clients": clients, "requests": len(out), "requests_per_s": round(len(out) / wall, 1),
            "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "max_ms": round(lat[-1], 1) if lat else None,
            "errors": len(errors), "first_errors": errors[:3],
            "repeated_paths": round(repeats / len(out), 3) if out else None,
            "p50_ms_by_kind": {k: pct(v, 0.5) for k, v in by_kind.items() if v}}


def _writer(url: str, rounds_s: float, until: float, tag: int, results: "mp.Queue") -> None:
    """A build's lineage writes, one transaction per stage, until `until`; the longest transaction
    (which includes any wait for a lock another writer or reader holds) goes back on the queue."""
    db = Database(url, migrate=False)
    longest, builds, rng = 0.0, 0, random.Random(tag)
    tc, src = h("tc"), h("src")
    while time.time() < until:
        b = f"w{tag}-{builds}-{os.getpid()}"
        f, q, z = h("f", b), h("q", b), h("b", b)
        now = datetime.now(timezone.utc)
        base = dict(size=1000, source_id=src, toolchain_id=tc, recipe_digest=None, imported=False, created_at=now,
                    supersedes_sha256=None)
        steps = [
            lambda s: s.execute(insert(Artifact), [dict(sha256=f, kind="float_tflite", uri=f"file:///s/{f}", name=None,
                                                        details={}, **base)]),
            lambda s: (s.execute(insert(Artifact), [dict(sha256=q, kind="quantized_tflite", uri=f"file:///s/{q}",
                                                         name=None, details={}, **base)]),
                       s.execute(insert(ArtifactInput), [dict(artifact_sha256=q, role="float_model", input_sha256=f)])),
            lambda s: (s.execute(insert(Artifact), [dict(sha256=z, kind="litertlm", uri=f"file:///s/{z}",
                                                         name=f"w{tag}.litertlm", details={}, **base)]),
                       s.execute(insert(ArtifactInput), [dict(artifact_sha256=z, role="model", input_sha256=q)]),
                       s.execute(insert(Section), [dict(artifact_sha256=z, idx=i, type=t, offset=16384 * (i + 1),
                                                        size=10, sha256=h(t, b))
                                                   for i, t in enumerate(("LlmMetadataProto", "HF_Tokenizer_Zlib",
                                                                          "TFLiteModel"))])),
        ]
        steps += [lambda s, g=g: record_gate_result(
            s, artifact_sha256=z, gate=f"gate{g}", gate_version=1, kind="bundle", status="pass", runtime="litert-lm",
            runtime_version="0.10.1", backend="cpu", device="host", metrics={"kl": rng.random()}, evidence=[],
            findings=[], config={}, started_at=now, finished_at=now) for g in range(8)]
        steps.append(lambda s: record_device_result(
            s, artifact_sha256=z, device_id="local-cpu", accelerator="cpu", status="verified", prefill_tokens=32,
            decode_tokens=32, runs=3, decode_tokens_per_s=80.0, env={}, evidence=[], protocol={},
            started_at=now, finished_at=now))
        for step in steps:
            t0 = time.perf_counter()
            with db.session() as s:
                step(s)
            longest = max(longest, time.perf_counter() - t0)
            time.sleep(rounds_s / len(steps))
        builds += 1
    db.engine.dispose()
    results.put({"builds": builds, "longest_write_s": round(longest, 3)})


def _serve(url: str, home: Path, port: int, workers: int = 0) -> subprocess.Popen:
    env = {**os.environ, "FARM_HOME": str(home), "FARM_DATABASE_URL": url}
    proc = subprocess.Popen([sys.executable, "-m", "farm_cli", "api", "--port", str(port), "--workers", str(workers)],
                            cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(home / "api.log", "w"))
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"farm api exited: {(home / 'api.log').read_text()[-2000:]}")
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("farm api did not start listening within 60 s")


def run(kind: str, n: int, clients: list[int], seconds: float, writers: bool) -> list[dict]:
    rows: list[dict] = []
    home = Path(tempfile.mkdtemp(prefix="farm-load-"))
    with throwaway_database(kind) as db:
        bundles = seed_and_analyze(db, n)
        url = db.url
        port = _free_port()

        def fresh() -> subprocess.Popen:
            """A new `farm api` per case, so no case starts with answers an earlier one left kept;
            warmed (imports, pools, the OS page cache) by 2 s of lookups of bundles outside the mix."""
            nonlocal api
            if api is not None:
                api.terminate()
                api.wait(timeout=30)
            api = _serve(url, home, port, WORKERS)
            asyncio.run(_drive(port, warm, 4, 2))
            return api

        # The listing as the API makes it on a miss (no kept answer: right after any write), in-process.
        from farm.lineage.queries.artifacts import list_artifacts

        times = []
        for _ in range(60):
            t0 = time.perf_counter()
            with db.session() as s:
                list_artifacts(s, None, 20)
            times.append((time.perf_counter() - t0) * 1000)
        times = sorted(times[10:])
        rows.append({"db": kind, "case": "listing, made (no kept answer)", "clients": 1, "requests": len(times),
                     "requests_per_s": round(1000 / statistics.mean(times), 1), "p50_ms": round(times[len(times) // 2], 2),
                     "p99_ms": round(times[-1], 2), "max_ms": round(times[-1], 2), "errors": 0, "repeated_paths": 1.0})
        warm, bundles = bundles[:1000], bundles[1000:]
        api = None
        try:
            fresh()
            listing = asyncio.run(_drive(port, bundles, 1, min(seconds, 10), only="list"))
            rows.append({"db": kind, "case": "listing alone", **listing})
            for c in clients:
                fresh()
                rows.append({"db": kind, "case": "mix", **asyncio.run(_drive(port, bundles, c, seconds))})
            if writers:
                fresh()
                ctx = mp.get_context("spawn")
                q: mp.Queue = ctx.Queue()
                until = time.time() + seconds
                procs = [ctx.Process(target=_writer, args=(url, 2.0, until, i, q)) for i in range(2)]
                for p in procs:
                    p.start()
                row = {"db": kind, "case": "mix, 2 builds writing", **asyncio.run(_drive(port, bundles, max(clients), seconds))}
                for p in procs:
                    p.join(timeout=seconds + 60)
                got = [q.get(timeout=10) for _ in procs]
                row["writer_builds"] = sum(g["builds"] for g in got)
                row["longest_write_s"] = max(g["longest_write_s"] for g in got)
                rows.append(row)
        finally:
            if api is not None:
                api.terminate()
                api.wait(timeout=30)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifacts", type=int, default=100_000)
    ap.add_argument("--db", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 10, 50])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--no-writers", action="store_true", help="skip the run with two builds writing")
    ap.add_argument("--workers", type=int, default=0, help="farm api --workers (0: its default, one per core)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    global WORKERS
    WORKERS = args.workers
    for kind in args.db:
        for row in run(kind, args.artifacts, args.clients, args.seconds, not args.no_writers):
            if args.json:
                print(json.dumps(row), flush=True)
                continue
            extra = (f"  writers: {row['writer_builds']} builds, longest write {row['longest_write_s']} s"
                     if "writer_builds" in row else "")
            print(f"{row['db']:<10} {row['case']:<30} {row['clients']:>3} clients  {row['requests_per_s']:7.1f} req/s  "
                  f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  max {row['max_ms']} ms  "
                  f"errors {row['errors']}  repeated paths {row['repeated_paths']:.0%}{extra}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
