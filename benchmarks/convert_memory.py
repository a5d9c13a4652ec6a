"""Where a conversion's memory goes, and what brings its peak down: one model folder, the
toolchain's own `export` command (what the farm's convert stage runs) once per variant, each in a
fresh process. Per variant: wall, peak resident memory (VmHWM of the process, and VmRSS of the
process tree sampled every 0.2 s), the phase the peak happened in (the last progress line printed
before the sampled peak: litert-torch's "Torch Export: …", "Run FX Passes", the farm's own lines),
and the sha256 of the float .tflite, so a variant that changes the bytes is seen as one (with
`--keep`, also a digest of its content: tensors and operators wherever the constants lie, which is
what two exports of 2 GB or more can be compared by).

    .venv/bin/python benchmarks/convert_memory.py --size 0.8b [--variant bare once once+lightweight ...]
        [--keep DIR] [--json]

Sizes are scale.py's (the seeds' Qwen3.5 shapes; "0.8b" and "2b" at full depth), generated once
into ~/.cache/farm/bench-models/<size> with random weights (the toolchain's make_model).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import SIZES  # noqa: E402

# Export options per variant (passed to litert-torch's export() as the farm passes a config's
# export.options). Each is measured against "bare" in the same run.
# "bare" is litert-torch's own path (the request's weights_once: false); "once" is the farm's
# default (farm_toolchain/weights_once.py).
VARIANTS: dict[str, dict] = {
    "bare": {"weights_once": False},
    "once": {},
    "lightweight": {"weights_once": False, "options": {"experimental_lightweight_conversion": True}},
    "once+lightweight": {"options": {"experimental_lightweight_conversion": True}},
    "v2": {"weights_once": False, "options": {"use_v2": True}},
    "v2-stream": {"weights_once": False, "options": {"use_v2": True, "delete_in_memory_params": True}},
    "bf16": {"weights_once": False, "options": {"model_dtype": "bfloat16"}},
}
MODELS = Path(os.environ.get("FARM_BENCH_MODELS", Path.home() / ".cache" / "farm" / "bench-models"))


def toolchain_python() -> str:
    from farm.settings import get_settings
    from farm.toolchain import Toolchain

    return str(Toolchain(get_settings()).python)


def one_shot(python: str, command: str, request: dict, sample: bool = False) -> dict:
    """Run one toolchain command in a fresh process; with `sample`, VmRSS of its tree every 0.2 s
    and its stderr lines with their times."""
    t0 = time.monotonic()
    proc = subprocess.Popen([python, "-m", "farm_toolchain", command], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONHASHSEED": "0"})
    lines: list[tuple[float, str]] = []
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def read_err() -> None:
        for line in proc.stderr:
            lines.append((time.monotonic() - t0, line.rstrip()))

    hwm: list[int] = [0]

    def sampler() -> None:
        while not done.is_set():
            samples.append((time.monotonic() - t0, _tree_rss(proc.pid)))
            hwm[0] = max(hwm[0], _status(proc.pid, "VmHWM:"))
            done.wait(0.2)

    threads = [threading.Thread(target=read_err, daemon=True)]
    if sample:
        threads.append(threading.Thread(target=sampler, daemon=True))
    for t in threads:
        t.start()
    out, _ = proc.communicate(json.dumps(request))
    wall = time.monotonic() - t0
    done.set()
    for t in threads:
        t.join(timeout=5)
    result = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"ok": False, "error": "no result"}
    result["_wall"] = wall
    result["_lines"] = lines
    result["_samples"] = samples
    result["_hwm"] = hwm[0]  # the process's own peak (VmHWM), read until it exits: no sample misses it
    return result


def _status(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(kids.get(p, []))
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def model_folder(python: str, size: str) -> Path:
    spec = SIZES[size]
    folder = MODELS / size
    if not (folder / "config.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        print(f"generating {size} into {folder} …", file=sys.stderr)
        from farm.families.tiny import make_model_request  # the orchestrator's venv runs this script

        r = one_shot(python, "make_model", make_model_request("qwen3_5", config=spec["config"], seed=0,
                                                              tokenizer={"vocab_size": spec["vocab"]},
                                                              output_dir=str(folder)))
        if not r.get("ok"):
            sys.exit(f"make_model failed: {r.get('error')}")
    return folder


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def measure(python: str, folder: Path, variant: str, prefill: list[int], cache: int, keep: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"convmem-{variant}-", dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        spec = VARIANTS[variant]
        r = one_shot(python, "export", {"model_dir": str(folder), "output_dir": str(Path(tmp) / "out"),
                                        "prefill_lengths": prefill, "cache_length": cache,
                                        "weights_once": spec.get("weights_once", True),
                                        "options": {"use_fused_gdn": False, **spec.get("options", {})}},
                     sample=True)
        row: dict = {"variant": variant, "request": spec, "ok": bool(r.get("ok")),
                     "wall_s": round(r["_wall"], 1)}
        if not r.get("ok"):
            row["error"] = r.get("error")
            row["stderr_tail"] = [line for _t, line in r["_lines"][-8:]]
        else:
            tfl = Path(r["tflite_path"])
            row.update(export_s=r.get("seconds"), tflite_bytes=tfl.stat().st_size, sha256=sha256(tfl),
                       files=sorted(p.name for p in tfl.parent.iterdir()))
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                os.replace(tfl, keep / f"{variant}.tflite")
        samples = r["_samples"]
        if samples:
            t_peak, peak = max(samples, key=lambda s: s[1])
            before = [line for t, line in r["_lines"] if t <= t_peak and line.strip()]
            row.update(peak_sampled_gib=round(peak / 2**30, 2), peak_hwm_gib=round(r["_hwm"] / 2**30, 2),
                       peak_at_s=round(t_peak, 1),
                       peak_phase=before[-1][:160] if before else "start",
                       timeline=_timeline(samples, r["_lines"]))
        return row


# A .tflite's content wherever its constants lie: per subgraph, every tensor's name, shape, type and
# the sha256 of its constant bytes, and every operator's opcode and operands, hashed in order. A float
# export of 2 GB or more is not byte-reproducible with litert-torch 0.10.0 (the constants' placement
# moves from run to run), so two such files are compared by this instead of their sha256.
_CONTENT = """
import hashlib, json, mmap, sys
from farm_toolchain.tflite import Model, buffer_data
out = {}
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        m = Model(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        h = hashlib.sha256()
        for sg in m.subgraphs():
            for ti in range(sg.TensorsLength()):
                t = sg.Tensors(ti)
                data = bytes(buffer_data(m, t.Buffer())) if m.buffer_has_data(t.Buffer()) else b""
                h.update(repr((t.Name(), [int(x) for x in t.ShapeAsNumpy()] if t.ShapeLength() else [],
                               t.Type(), hashlib.sha256(data).hexdigest())).encode())
            for oi in range(sg.OperatorsLength()):
                op = sg.Operators(oi)
                h.update(repr((m.opcodes[op.OpcodeIndex()], [int(x) for x in op.InputsAsNumpy()],
                               [int(x) for x in op.OutputsAsNumpy()])).encode())
        out[path] = h.hexdigest()
print(json.dumps(out))
"""


def content_digests(python: str, paths: list[Path]) -> dict[str, str]:
    """{path: content digest} (see _CONTENT), read in the toolchain env."""
    out = subprocess.run([python, "-c", _CONTENT, *map(str, paths)], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    if out.returncode != 0:
        sys.exit(f"content digest failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _timeline(samples: list[tuple[float, int]], lines: list[tuple[float, str]]) -> list[dict]:
    """The largest RSS seen between one progress line and the next: where the memory goes."""
    marks = [(t, line) for t, line in lines if line.strip()]
    out = []
    for i, (t, line) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else float("inf")
        inside = [rss for ts, rss in samples if t <= ts < end]
        if inside:
            out.append({"t": round(t, 1), "line": line[:120], "max_gib": round(max(inside) / 2**30, 2)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="0.8b-shape", choices=sorted(SIZES))
    ap.add_argument("--variant", nargs="+", default=["bare", "once"], choices=list(VARIANTS))
    ap.add_argument("--prefill", type=int, nargs="+", default=[8])
    ap.add_argument("--cache", type=int, default=64)
    ap.add_argument("--keep", type=Path, help="keep each variant's float .tflite here as VARIANT.tflite, and "
                    "compare their content (tensors and operators, wherever the constants lie)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    python = toolchain_python()
    folder = model_folder(python, args.size)
    rows = []
    for v in args.variant:
        row = measure(python, folder, v, args.prefill, args.cache, args.keep)
        rows.append(row)
        if not args.json:
            print(f"{args.size} {v:12s} ok={row['ok']} wall {row['wall_s']} s peak {row.get('peak_hwm_gib')} GiB "
                  f"at {row.get('peak_at_s')} s in {row.get('peak_phase')!r} sha {str(row.get('sha256'))[:12]} "
                  f"{row.get('error', '')}", flush=True)
    if args.keep:
        kept = [args.keep / f"{r['variant']}.tflite" for r in rows if r["ok"]]
        digests = content_digests(python, kept)
        for r in rows:
            if r["ok"]:
                r["content"] = digests[str(args.keep / f"{r['variant']}.tflite")]
                if not args.json:
                    print(f"{r['variant']:12s} content {r['content'][:16]} (bytes {r['sha256'][:16]})")
    if args.json:
        print(json.dumps({"size": args.size, "prefill": args.prefill, "cache": args.cache, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
