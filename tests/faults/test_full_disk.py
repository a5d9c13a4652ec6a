"""A full disk, for real: FARM_HOME on a small tmpfs (mounted by the test; skipped where mounting is
not permitted). With 3 MB free a build is one line naming the disk before Prefect starts (it was
8,351 lines of the temporary server failing and a 3-minute timeout); with room for the command
but not for the source's bytes the store's ENOSPC is one line and leaves no partial object."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from farmtest import REPO, farm_env, run_farm

pytestmark = pytest.mark.slow


@pytest.fixture
def tmpfs(tmp_path):
    mounted: list[Path] = []

    def make(size_mb: int, fill_mb: int = 0) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(where)
        if fill_mb:
            (where / "filler").write_bytes(b"\0" * (fill_mb * 2**20))
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr[-3000:]
    return lines[-1]


def test_a_disk_without_room_for_a_command_is_one_line_before_any_work(tmpfs):
    fs = tmpfs(40, fill_mb=37)
    env = farm_env(fs / "home")  # FARM_PREFECT_SERVER=temporary: its database would go under FARM_HOME
    t0 = time.monotonic()
    proc = run_farm(["build", str(REPO / "examples" / "tiny-llama.yaml"), "--no-gates", "--no-bench"], env, timeout=300)
    assert proc.returncode == 1 and time.monotonic() - t0 < 30
    line = _one_line(proc)
    assert line.startswith("error: ") and "needs about 64 MB free under" in line and str(fs) in line, line
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_store_that_fills_mid_build_is_one_line_and_no_partial_object(tmpfs, toolchain_python):
    # Room for the command (64 MB) but not for the model's weights: a tiny Llama widened to ~28 M
    # parameters (~110 MB of float32 weights, generated under FARM_CACHE), which the source stage
    # copies into the store on the 100 MB disk.
    fs = tmpfs(100)
    env = farm_env(fs / "home")
    cfg = fs / "wide-llama.yaml"
    cfg.write_text((REPO / "examples" / "tiny-llama.yaml").read_text()
                   .replace("name: tiny-llama", "name: wide-llama")
                   .replace("hidden_size: 64", "hidden_size: 512").replace("intermediate_size: 128",
                                                                         "intermediate_size: 8192"))
    proc = run_farm(["build", str(cfg), "--no-gates", "--no-bench"], env, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = _one_line(proc)
    assert "the disk is full under" in line and "model.safetensors" in line and "No space left" in line, line
    tmp = fs / "home" / "store" / "tmp"
    assert not tmp.exists() or not any(tmp.iterdir()), list(tmp.iterdir())
