"""What presenting a CPU class costs (issue 34): greedy decode speed of one bundle on every CPU class
this host presents — its own, the CPUID-masked x86 classes (native speed), the arm64 classes under
qemu-aarch64 (emulated: the figure is the emulator's, never the class's) — each in a runtime host
as the gates run it (farm_toolchain/cpu_class.py), a fresh Engine per prompt.

    .venv/bin/python benchmarks/cpu_classes.py SHA [--prompts 3] [--tokens 32] [--json]

The classes are the enabled CPU-class devices of the registry (FARM_DEVICES_FILE or
infra/devices.yaml). Prints, per class: tokens/s of a turn (the decoded tokens over the turn's wall
time, prefill included), the seconds one prompt took from Engine start to the reply, and the replies,
so a class that answers differently shows it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Runs in the toolchain env: one class, every prompt, a fresh Engine each (what the answer gates do).
PROBE = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from farm_toolchain import cpu_class
from farm_toolchain.gates import common
req = json.loads(sys.stdin.read())
out = []
with cpu_class.presenting(req["cpu"]) as view:
    for prompt in req["prompts"]:
        t0 = time.monotonic()
        with common.fresh_engine(req["bundle"], 512, benchmark=True) as engine:
            conv = engine.create_conversation(sampler_config=common.greedy_sampler(), max_output_tokens=req["tokens"])
            t1 = time.monotonic()
            reply = common.message_text(conv.send_message(prompt))
            t2 = time.monotonic()
            info = conv.get_benchmark_info()
            n = int(info.last_decode_token_count)
            conv.close()
        out.append({"prompt": prompt, "reply": reply, "tokens": n, "engine_to_reply_s": round(t2 - t0, 3),
                    "turn_s": round(t2 - t1, 3)})
print(json.dumps({"cpu": view.to_dict(), "runs": out}))
cpu_class.close_all()
'''

PROMPTS = ["What is 2 + 3?", "What is the capital of Japan?", "How many days are in a week?",
           "What is the opposite of hot?", "What is the chemical symbol for water?"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sha")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from farm.devices.classes import class_targets
    from farm.lineage.queries.artifacts import resolve_sha
    from farm.resources import get_resources

    res = get_resources()
    with res.db.session() as s:
        sha = resolve_sha(s, args.sha)
    bundle = str(res.store.open_verified_path(sha))
    targets = class_targets(res)
    rows = []
    for t in targets.presented:
        req = {"cpu": t.presentation, "bundle": bundle, "prompts": PROMPTS[:args.prompts], "tokens": args.tokens}
        cp = subprocess.run([str(res.toolchain.python), "-c", PROBE, str(REPO)], input=json.dumps(req),
                            capture_output=True, text=True, timeout=7200)
        if cp.returncode != 0:
            rows.append({"device": t.device.id, "class": t.view.label, "error": cp.stderr.strip().splitlines()[-1:]})
            continue
        got = json.loads(cp.stdout.strip().splitlines()[-1])
        runs = got["runs"]
        tokens = sum(r["tokens"] for r in runs)
        turn = sum(r["turn_s"] for r in runs)
        rows.append({"device": t.device.id, "class": t.view.label, "how": t.view.how, "tokens": tokens,
                     "turn_tokens_per_s": round(tokens / turn, 2) if turn else None,
                     "seconds_per_prompt": round(sum(r["engine_to_reply_s"] for r in runs) / len(runs), 2),
                     "replies": [r["reply"] for r in runs]})
    for d, why in targets.left_out:
        rows.append({"device": d.id, "left_out": why})
    if args.json:
        print(json.dumps({"sha256": sha, "classes": rows}, indent=2))
        return
    print(f"{sha[:12]}: {args.prompts} prompts x up to {args.tokens} tokens, a fresh Engine each")
    for r in rows:
        if "left_out" in r:
            print(f"  {r['device']:<18} left out: {r['left_out']}")
        elif "error" in r:
            print(f"  {r['device']:<18} {r['class']:<26} error: {r['error']}")
        else:
            print(f"  {r['device']:<18} {r['class']:<26} {r['how']:<10} {r['turn_tokens_per_s'] or 0:8.2f} tok/s "
                  f"(prefill + decode of the turn)  {r['seconds_per_prompt']:7.2f} s/prompt  {r['replies'][0][:40]!r}")


if __name__ == "__main__":
    main()
