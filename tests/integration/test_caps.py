"""A build capped by time (--max-minutes) or memory (--max-memory-gb) stops with one clear line,
not a hang or the kernel's OOM killer (or, for a memory cap no export fits in, is refused before any
work); the same build without the cap is the passing case (the session's `built` fixture)."""

from __future__ import annotations

import json
import time

import pytest

from farmtest import CONVERTER_RUNS, farm_env, run_farm

pytestmark = pytest.mark.slow


def _fresh(tmp_path, built):
    # The caps stop litert-torch's export (the stage that is long and heavy): it must run, not be
    # replayed from the run's FARM_EXPORT_CACHE (replayed, the capped build finished: measured).
    home = tmp_path / "home"
    return farm_env(home, built.env.get("PREFECT_API_URL"), **CONVERTER_RUNS)


def test_a_memory_cap_below_the_predicted_export_peak_is_refused_before_any_work(built, tmp_path):
    """No export fits in 0.25 GiB (the toolchain alone is ~0.7 GiB resident): the too-large refusal
    says so with the predicted figure before the source stage's toolchain starts (issue 22)."""
    env = _fresh(tmp_path, built)
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--no-gates", "--max-memory-gb", "0.25", "--json"], env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    refused = json.loads(proc.stdout)["refused"]
    assert refused["reason"] == "too_large" and "predicted to peak at 0.7 GiB" in refused["detail"], refused
    assert "may use 0.2 GiB" in refused["detail"] and "Traceback" not in proc.stderr


def test_a_memory_cap_stops_the_toolchain_with_a_clear_error(built, tmp_path):
    """--max-memory-gb stays the hard cap where the prediction is short: 0.74 GiB is over the tiny
    model's predicted export peak (0.70 GiB: the toolchain's floor) and under what the toolchain
    process holds once litert-torch is imported (0.77 GiB measured), so the build starts and the
    toolchain is stopped at the cap."""
    env = _fresh(tmp_path, built)
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--no-gates", "--max-memory-gb", "0.74"], env)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "over the build's 0.7 GiB memory cap" in line, line
    assert "OOM killer" in line and "Traceback" not in proc.stderr


def test_a_time_cap_stops_the_build_with_a_clear_error(built, tmp_path):
    env = _fresh(tmp_path, built)
    t0 = time.monotonic()
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--no-gates", "--max-minutes", "0.15"], env)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "ran past its time limit (--max-minutes)" in line and "Traceback" not in proc.stderr
    assert took < 120, f"the 9 s cap took {took:.0f} s to stop the build"
