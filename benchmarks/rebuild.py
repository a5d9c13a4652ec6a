"""Build-cache benchmark on the tiny Qwen3.5 (targets, not tests; see benchmarks/README.md).

The build stages only (`--no-gates`; the gate suite is timed by benchmarks/gates.py).
In one run, on one machine (ratios are measured within the run because this machine is noisy):
  cold      `farm build` with a fresh FARM_HOME (the generated source model is already in FARM_CACHE)
  noop      the same build again: no stage may run                       target <= 15 % of cold
  recipe    the same config with another recipe: convert must not run   target <= 40 % of cold
  bare      litert-torch export_hf alone, same model, settings and recipe, bundling a .litertlm
                                                                         target: cold <= 1.25 x bare
Prefect: `--prefect ephemeral` (no PREFECT_API_URL: a temporary server per command, the embedded
default) or `--prefect server` (a `prefect server start` this script runs, as in production).

  .venv/bin/python benchmarks/rebuild.py [--prefect ephemeral|server] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare import bare_export  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "examples" / "tiny-qwen35.yaml"


def farm(args: list[str], env: dict[str, str]) -> tuple[float, dict]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "farm_cli", *args, "--json", "--no-gates"], env=env, cwd=REPO,
                          capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"farm {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def start_prefect_server(home: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/api"
    for _ in range(180):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    sys.exit("prefect server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefect", choices=["ephemeral", "server"], default="ephemeral")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    sys.path.insert(0, str(REPO))
    from farm.settings import Settings
    from farm.toolchain import Toolchain

    tmp = Path(tempfile.mkdtemp(prefix="farm-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({"FARM_HOME": str(tmp / "home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    server = None
    try:
        if args.prefect == "server":
            server, url = start_prefect_server(tmp / "prefect-server")
            env["PREFECT_API_URL"] = url
        # Warm-up in a throw-away FARM_HOME: makes the generated source model in FARM_CACHE.
        farm(["build", str(CONFIG)], {**env, "FARM_HOME": str(tmp / "warm")})
        shutil.rmtree(tmp / "warm")

        cold, out = farm(["build", str(CONFIG)], env)
        noop, out2 = farm(["build", str(CONFIG)], env)
        recipe, out3 = farm(["build", str(CONFIG), "--recipe", "dynamic_wi8_afp32"], env)
        ran = lambda o: [s["name"] for s in o["stages"] if s["status"] == "ran"]  # noqa: E731
        tc = Toolchain(Settings(home=tmp / "home"))
        lineage = json.loads(subprocess.run([sys.executable, "-m", "farm_cli", "lineage", out["artifact"]["sha256"], "--json"],
                                            env=env, cwd=REPO, capture_output=True, text=True).stdout)
        bare, _peak = bare_export(str(tc.python), lineage["source"]["path"], tmp / "bare")
        figures = {
            "prefect": args.prefect,
            "cold_s": round(cold, 2),
            "noop_s": round(noop, 2),
            "recipe_only_s": round(recipe, 2),
            "bare_export_s": round(bare, 2),
            "noop_ratio": round(noop / cold, 3),
            "recipe_only_ratio": round(recipe / cold, 3),
            "cold_vs_bare": round(cold / bare, 3),
            "stages_cold": {s["name"]: s["seconds"] for s in out["stages"]},
            "ran_on_noop": ran(out2),
            "ran_on_recipe_only": ran(out3),
            "targets_met": {
                "noop<=0.15": noop / cold <= 0.15 and not ran(out2),
                "recipe_only<=0.40": recipe / cold <= 0.40 and "convert" not in ran(out3),
                "cold<=1.25*bare": cold / bare <= 1.25,
            },
        }
    finally:
        if server:
            server.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for k, v in figures.items():
            print(f"{k:<20} {v}")


if __name__ == "__main__":
    main()
