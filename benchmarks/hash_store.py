#!/usr/bin/env python
"""How fast LocalStore.put_file ingests a big file, against `sha256sum` on the same file.

    python benchmarks/hash_store.py [--size-mb 2048] [--repeat 3] [--dir DIR] [--json]

Creates the file in a temp dir (on the filesystem of --dir), then times, with the file in the
page cache for every run (it was just written; there is no cache dropping):

  sha256sum       coreutils, the target baseline
  openssl dgst    a SHA-NI-accelerated reference, when `openssl` is installed
  hash only       farm.store._io.hash_file (what an S3 put does before uploading)
  cp + sync       coreutils cp then sync of the copy: the cost of writing the bytes at all
  put             LocalStore.put_file into a fresh store: one pass of copy + hash, fsync, rename
  put (again)     the idempotent path: the object exists (and verifies by its stat stamp), the copy
                  is dropped
  verify          store.verify on a cache hit: the stat against the stamp of the last full hash
                  (what a no-op rebuild adds per cached stage)
  verify (full)   store.verify(full=True): every byte hashed (`farm store verify`)

Every farm measurement runs in a fresh child process; its peak RSS comes from that child's own
rusage (os.wait4), cross-checked with resource.getrusage(RUSAGE_CHILDREN). Times are the median
over --repeat runs (all runs are in the JSON). Targets: put >= 0.8x sha256sum throughput, put
peak RSS <= 100 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20

CHILD = r"""
import json, sys, time
mode, root, path = sys.argv[1:4]
from farm.store.local import LocalStore
from farm.store._io import hash_file
store = LocalStore(root)
t = time.perf_counter()
if mode == "hash":
    sha, size = hash_file(path)
elif mode.startswith("verify"):
    sha, size = sys.argv[4], 0
    assert store.verify(sha, full=mode == "verify_full") == "ok"
else:
    ref = store.put_file(path)
    sha, size = ref.sha256, ref.size
print(json.dumps({"seconds": time.perf_counter() - t, "sha256": sha, "size": size}))
"""


def make_file(path: Path, size: int) -> None:
    """Random bytes (a 16 MiB random block, each MiB stamped with its index so none repeat)."""
    block = bytearray(os.urandom(16 * MiB))
    with open(path, "wb") as f:
        written = 0
        while written < size:
            n = min(len(block), size - written)
            for off in range(0, n, MiB):
                block[off : off + 8] = (written + off).to_bytes(8, "little")
            f.write(memoryview(block)[:n])
            written += n
        f.flush()
        os.fsync(f.fileno())


def run_tool(cmd: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def run_child(mode: str, root: Path, path: Path, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(root), str(path), *extra], stdout=subprocess.PIPE, env=env
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    if proc.returncode != 0:
        raise SystemExit(f"{mode} child failed with exit code {proc.returncode}")
    result = json.loads(out)
    result["wall_seconds"] = time.perf_counter() - t  # including interpreter start-up
    result["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: KiB
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=2048, help="file size in MiB (default 2048)")
    ap.add_argument("--repeat", type=int, default=4, help="runs of each measurement (median reported)")
    ap.add_argument("--dir", type=Path, default=None, help="where to create the temp dir")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    size = args.size_mb * MiB

    work = Path(tempfile.mkdtemp(prefix="farm-hash-bench-", dir=args.dir))
    try:
        src = work / "input.bin"
        make_file(src, size)

        runs: dict[str, list[float]] = {
            "sha256sum": [], "openssl": [], "hash": [], "cp": [], "put": [], "put_again": [], "verify": [],
            "verify_full": [],
        }
        rss: dict[str, list[float]] = {"hash": [], "put": [], "put_again": []}
        digests = set()
        subprocess.run(["cat", str(src)], stdout=subprocess.DEVNULL, check=True)  # warm the cache
        for i in range(args.repeat):
            seconds, out = run_tool(["sha256sum", str(src)])
            runs["sha256sum"].append(seconds)
            digests.add(out.split()[0])
            if shutil.which("openssl"):
                seconds, out = run_tool(["openssl", "dgst", "-sha256", "-r", str(src)])
                runs["openssl"].append(seconds)
                digests.add(out.split()[0])
            r = run_child("hash", work / "unused", src)
            runs["hash"].append(r["seconds"])
            rss["hash"].append(r["peak_rss_mb"])
            digests.add(r["sha256"])

            def cp() -> None:
                dst = work / "cp.bin"
                runs["cp"].append(run_tool(["sh", "-c", 'cp "$0" "$1" && sync "$1"', str(src), str(dst)])[0])
                dst.unlink()

            def put() -> None:
                root = work / f"store{i}"
                r = run_child("put", root, src)
                runs["put"].append(r["seconds"])
                rss["put"].append(r["peak_rss_mb"])
                digests.add(r["sha256"])
                r = run_child("put", root, src)  # the object exists now
                runs["put_again"].append(r["seconds"])
                rss["put_again"].append(r["peak_rss_mb"])
                for mode in ("verify", "verify_full"):
                    runs[mode].append(run_child(mode, root, src, r["sha256"])["seconds"])
                shutil.rmtree(root)

            # Alternate the order: whichever writes right after the other's file was deleted
            # reuses its freed pages, which on some VMs is much faster than fresh memory.
            for step in ((cp, put) if i % 2 == 0 else (put, cp)):
                step()
        if len(digests) != 1:
            raise SystemExit(f"digests disagree: {sorted(digests)}")
        children_max_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    finally:
        shutil.rmtree(work, ignore_errors=True)

    size_mib = size / MiB
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    mibps = {k: size_mib / v for k, v in med.items()}
    report = {
        "size_mib": args.size_mb,
        "repeat": args.repeat,
        "sha256": digests.pop(),
        "median_seconds": med,
        "throughput_mib_s": mibps,
        "all_seconds": runs,
        "peak_rss_mb": {k: max(v) for k, v in rss.items()},
        "rusage_children_max_rss_mb": children_max_rss_mb,
        "put_vs_sha256sum": mibps["put"] / mibps["sha256sum"],
        "targets": {"put_vs_sha256sum_min": 0.8, "put_peak_rss_mb_max": 100},
    }
    report["targets_met"] = (
        report["put_vs_sha256sum"] >= 0.8 and report["peak_rss_mb"]["put"] <= 100
    )
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    names = {
        "sha256sum": "sha256sum",
        "openssl": "openssl dgst -sha256",
        "hash": "farm hash only",
        "cp": "cp + sync (copy only)",
        "put": "LocalStore.put_file",
        "put_again": "put_file (exists)",
        "verify": "verify (cache hit)",
        "verify_full": "verify (full)",
    }
    print(f"{args.size_mb} MiB file, warm page cache, median of {args.repeat}")
    for k, label in names.items():
        if k in med:
            extra = f"   peak RSS {report['peak_rss_mb'][k]:.1f} MB" if k in rss else ""
            print(f"  {label:22s} {med[k]:7.2f} s  {mibps[k]:8.0f} MiB/s{extra}")
    print(f"  put / sha256sum throughput: {report['put_vs_sha256sum']:.2f}x (target >= 0.8x)")
    print(f"  put peak RSS: {report['peak_rss_mb']['put']:.1f} MB (target <= 100 MB); "
          f"RUSAGE_CHILDREN max {children_max_rss_mb:.1f} MB")
    print("  targets met" if report["targets_met"] else "  TARGETS NOT MET")
    return 0


if __name__ == "__main__":
    sys.exit(main())
