"""A build capped by time (--max-minutes) or memory (--max-memory-gb) stops with one clear line,
not a hang or the kernel's OOM killer; the same build without the cap is the passing case (the
session's `built` fixture)."""

from __future__ import annotations

import time

import pytest

from farmtest import farm_env, run_farm

pytestmark = pytest.mark.slow


def _fresh(tmp_path, built):
    home = tmp_path / "home"
    return farm_env(home, built.env.get("PREFECT_API_URL"))


def test_a_memory_cap_stops_the_toolchain_with_a_clear_error(built, tmp_path):
    env = _fresh(tmp_path, built)
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--no-gates", "--max-memory-gb", "0.25"], env)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "over the build's 0.2 GiB memory cap" in line or "over the build's 0.3 GiB memory cap" in line, line
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
