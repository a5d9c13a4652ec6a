"""How the farm scales with model size: the same Qwen3.5 architecture generated at three sizes up
to a real model's layer shapes, each built end to end (`farm build --no-gates`, a fresh FARM_HOME,
the farm's background Prefect server) and exported bare with litert-torch's own one-call
`export(..., quantization_recipe="dynamic_wi8_afp32", bundle_litert_lm=True)` on the same model
folder and settings, in the same run. Per size: wall time and peak resident memory of every stage
(the toolchain's per-request peak, recorded in lineage), the bare export's wall and peak, artifact
sizes, and hash / store throughput on the real bundle. Then a least-squares fit of time and
memory per parameter, and what a 2B model needs.

    .venv/bin/python benchmarks/scale.py [--sizes tiny 50m 0.8b-shape 0.8b 2b] [--repeats N] [--json]

Target (issue: scale): the farm / bare wall-time ratio stays <= 1.10 at every size.
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
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare import bare_export  # noqa: E402  (benchmarks/bare.py: the same bare export as rebuild.py)

FARM = [sys.executable, "-m", "farm_cli"]

# Qwen3.5-0.8B's layer shapes (hidden 1024, MLP 3584, 8 query / 2 KV heads of 256, GatedDeltaNet
# 16 key / 16 value heads of 128, vocabulary 248,320, tied embeddings) with 4 of its 24 layers.
SIZES: dict[str, dict] = {
    "tiny": {"config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4}, "vocab": 512},
    "50m": {"config": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8,
                       "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
                       "linear_num_key_heads": 8, "linear_num_value_heads": 8, "linear_key_head_dim": 64,
                       "linear_value_head_dim": 64, "vocab_size": 32768, "tie_word_embeddings": True},
            "vocab": 512},
    "0.8b-shape": {"config": {"hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 4,
                              "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
                              "linear_num_key_heads": 16, "linear_num_value_heads": 16,
                              "linear_key_head_dim": 128, "linear_value_head_dim": 128, "vocab_size": 248320,
                              "tie_word_embeddings": True},
                   "vocab": 512},
}
# The seeds' own models at full depth (random weights, the real vocabulary): Qwen3.5-0.8B (24 layers,
# 18 GatedDeltaNet + 6 attention; ~0.75B parameters) and Qwen3.5-2B (24 layers, 18 + 6, hidden 2048,
# MLP 6144, ungrouped 16 key / 16 value linear heads as its card says; ~1.9B parameters). Not in the
# default --sizes: a full-depth build takes ~10 (0.8b) to ~25 min (2b) here and most of the machine's
# memory; benchmarks/convert_memory.py measures their conversion alone.
FULL_SIZES: dict[str, dict] = {
    "0.8b": {"config": {**SIZES["0.8b-shape"]["config"], "num_hidden_layers": 24}, "vocab": 512},
    "2b": {"config": {**SIZES["0.8b-shape"]["config"], "hidden_size": 2048, "intermediate_size": 6144,
                      "num_hidden_layers": 24}, "vocab": 512},
}
DEFAULT_SIZES = list(SIZES)
SIZES.update(FULL_SIZES)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(name: str, spec: dict) -> str:
    import yaml

    return yaml.safe_dump({
        "name": f"scale-{name}", "family": "qwen3_5",
        "source": {"kind": "generated", "family": "qwen3_5", "seed": 0, "config": spec["config"],
                   "tokenizer": {"vocab_size": spec["vocab"]}},
        "export": {"prefill_lengths": [8], "cache_length": 64},
        "recipe": "dynamic_wi8_afp32",
    })


def _farm(args: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(FARM + args, env=env, cwd=REPO, capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise SystemExit(f"farm {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return time.perf_counter() - t0, proc


def _hash_store(bundle: Path, tmp: Path) -> dict:
    from farm.store import hash_file
    from farm.store.local import LocalStore

    size = bundle.stat().st_size
    t0 = time.perf_counter()
    hash_file(bundle)
    h = time.perf_counter() - t0
    t0 = time.perf_counter()
    LocalStore(tmp / "store").put_file(bundle)
    p = time.perf_counter() - t0
    return {"hash_MBps": round(size / h / 1e6, 1), "put_MBps": round(size / p / 1e6, 1)}


def _farm_build(name: str, spec: dict, home: Path) -> dict:
    """One cold `farm build --no-gates` in a fresh FARM_HOME: its wall, stages and lineage records."""
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "PREFECT_"))}
    env.update(FARM_HOME=str(home), FARM_PREFECT_PORT=str(_port()))
    if os.environ.get("FARM_CACHE"):
        env["FARM_CACHE"] = os.environ["FARM_CACHE"]
    cfg = home / f"scale-{name}.yaml"
    cfg.write_text(_config(name, spec))
    try:
        _farm(["server", "start"], env)
        wall, proc = _farm(["build", str(cfg), "--no-gates", "--json"], env)
        out = json.loads(proc.stdout)
        sha = out["artifact"]["sha256"]
        rec = json.loads(_farm(["lineage", sha, "--json"], env)[1].stdout)
        quant = json.loads(_farm(["lineage", rec["recipe"]["quantized_model"]["sha256"], "--json"], env)[1].stdout)
        flt = json.loads(_farm(["lineage", rec["float_export"]["sha256"], "--json"], env)[1].stdout)
    finally:
        subprocess.run(FARM + ["server", "stop"], env=env, cwd=REPO, capture_output=True)
    return {"wall": wall, "stages": {s["name"]: s["seconds"] for s in out["stages"]}, "rec": rec, "quant": quant,
            "flt": flt, "home": home}


def measure(name: str, spec: dict, python: str, root: Path, repeats: int = 1) -> dict:
    """`repeats` farm / bare pairs, alternating which goes first (farm first, then bare first, ...):
    on a noisy machine a slow minute lands on either side. The ratio reported is the median of the
    pairs' ratios; every pair's is listed."""
    builds, bares, ratios = [], [], []
    model_dir = None
    for i in range(repeats):
        order = ("farm", "bare") if i % 2 == 0 else ("bare", "farm")
        for side in order:
            if side == "farm":
                builds.append(_farm_build(name, spec, root / f"{name}-{i}"))
                model_dir = model_dir or builds[-1]["rec"]["source"]["path"]
            else:
                bares.append(bare_export(python, model_dir, root / f"{name}-bare-{i}"))
        # The whole `farm build` wall, less the source stage (generating the model, which the bare
        # export is handed ready): CLI, Prefect, toolchain start, convert, quantize, package, hash.
        ratios.append((builds[-1]["wall"] - builds[-1]["stages"]["source"]) / bares[-1][0])
    b = builds[0]
    rec, quant, flt, stages = b["rec"], b["quant"], b["flt"], b["stages"]
    gib = 2**30
    return {
        "size": name,
        "params": flt["details"].get("source_params"),
        "stages_s": stages,
        "build_wall_s": round(b["wall"], 1),
        "peak_rss_gib": {
            "convert": round((flt["details"].get("peak_rss_bytes") or 0) / gib, 2),
            "quantize": round((quant["details"].get("toolchain_peak_rss_bytes") or 0) / gib, 2),
            "package": round((rec["details"].get("toolchain_peak_rss_bytes") or 0) / gib, 2),
        },
        "bare_s": round(bares[0][0], 1),
        "bare_peak_rss_gib": round(bares[0][1] / gib, 2),
        "farm_over_bare": round(statistics.median(ratios), 3),
        "pairs": [{"build_wall_s": round(x["wall"], 1), "source_s": round(x["stages"]["source"], 1),
                   "bare_s": round(y[0], 1), "ratio": round(r, 3)} for x, y, r in zip(builds, bares, ratios)],
        "bytes": {"float": flt["size"], "quantized": quant["size"], "bundle": rec["size"]},
        **_hash_store(Path(rec["uri"].removeprefix("file://")), b["home"]),
    }


def fit(rows: list[dict]) -> dict:
    """Least squares y = a + b * params for convert seconds and convert peak memory."""
    xs = [r["params"] for r in rows]
    out = {}
    for key, ys in (("convert_s", [r["stages_s"]["convert"] for r in rows]),
                    ("convert_peak_gib", [r["peak_rss_gib"]["convert"] for r in rows])):
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sum((x - mx) ** 2 for x in xs) or 1)
        a = my - b * mx
        out[key] = {"fixed": round(a, 3), "per_billion_params": round(b * 1e9, 3),
                    "at_2b": round(a + b * 2e9, 1)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES, choices=list(SIZES))
    ap.add_argument("--repeats", type=int, default=1,
                    help="farm / bare pairs per size, alternating which runs first; the ratio is their median")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from farm.settings import get_settings
    from farm.toolchain import Toolchain

    python = str(Toolchain(get_settings()).python)
    root = Path(tempfile.mkdtemp(prefix="farm-scale-"))
    rows = []
    for name in args.sizes:
        row = measure(name, SIZES[name], python, root, args.repeats)
        rows.append(row)
        print(json.dumps(row) if args.json else
              f"{name:<11} {row['params'] / 1e6:8.1f}M params  build {row['build_wall_s']:6.1f} s  stages "
              f"{row['stages_s']}  peak {row['peak_rss_gib']} GiB  bare {row['bare_s']} s "
              f"({row['bare_peak_rss_gib']} GiB)  farm/bare {row['farm_over_bare']} "
              f"(pairs {[p['ratio'] for p in row['pairs']]})  sizes {row['bytes']}  "
              f"hash {row['hash_MBps']} MB/s  put {row['put_MBps']} MB/s", flush=True)
    if len(rows) >= 2:
        print(json.dumps({"fit": fit(rows)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
