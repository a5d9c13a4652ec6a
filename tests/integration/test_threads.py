"""The toolchain's thread budget (farm_toolchain/threads.py) on the real runtime: honoured by every
Engine the gates open, and changing no answer — which is why a result's key does not name it."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from farmtest.gates import lineage

pytestmark = pytest.mark.slow

# One process per budget (the runtime reads its count when an Engine opens): the tasks the process
# has before and after the Engine opens, and the greedy replies to prompts whose tiny-model replies
# run to the cap (the longest greedy paths: where a different summation order would show first).
PROBE = r"""
import json, os, sys
from farm_toolchain.gates import common
from farm_toolchain import threads, tflite_run
before = len(os.listdir("/proc/self/task"))
with common.fresh_engine(sys.argv[1], 512) as engine:
    opened = len(os.listdir("/proc/self/task"))
    replies = [common.ask(engine, p, 64)["reply"] for p in sys.argv[3:]]
decoder = tflite_run.open_decoder(sys.argv[2], 8, 40)
logits = tflite_run.run_decoder(decoder, list(range(1, 41)), 8, 1)
print(json.dumps({"budget": threads.budget(), "engine_threads": opened - before, "replies": replies,
                  "logits": logits.tobytes().hex()}))
"""
PROMPTS = ["What is 2 + 3?", "Write a haiku about rain.", "Say the word yes one hundred times."]


def _probe(toolchain_python: str, bundle: str, tflite: str, omp: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    proc = subprocess.run([toolchain_python, "-c", PROBE, bundle, tflite, *PROMPTS], capture_output=True, text=True,
                          env=env, cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_budget_sets_the_runtime_threads_and_changes_no_reply_or_logit(built, toolchain_python):
    """Measured first (2026-12-07): left to itself litert-lm 0.18.1 starts 4 threads per Engine on
    any host; one per toolchain process when the budget is 1. The replies and the TFLite logits are
    byte-identical at 1 and 4 threads (and the test fails where they are not: the thread count would
    then have to be part of every result's key)."""
    rec = lineage(built, built.sha256)
    bundle = rec["uri"].removeprefix("file://")
    tflite = rec["float_export"]["uri"].removeprefix("file://")
    one, four = (_probe(toolchain_python, bundle, tflite, n) for n in ("1", "4"))
    assert one["budget"] == 1 and four["budget"] == 4
    # The Engine's own threads: none beside the caller's at 1, three pool workers at 4.
    assert one["engine_threads"] < four["engine_threads"], (one["engine_threads"], four["engine_threads"])
    assert one["replies"] == four["replies"] and all(one["replies"])
    assert one["logits"] == four["logits"]
