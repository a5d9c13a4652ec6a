"""A full disk, for real: FARM_HOME on a small tmpfs (mounted by the test; skipped where mounting is
not permitted). With 3 MB free a build is one line naming the disk before Prefect starts (it was
8,351 lines of the temporary server failing and a 3-minute timeout); with room for the command
but not for the source's bytes the store's ENOSPC is one line and leaves no partial object."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farmtest import CONVERTER_RUNS, REPO, farm_env, free_port, run_farm

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


def _fill(fs: Path) -> None:
    """Fill the disk to the last byte (a file written until ENOSPC)."""
    with open(fs / "filler-late", "wb", buffering=0) as f:
        chunk = b"\0" * 2**20
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_disk_that_fills_during_the_export_is_one_line_and_the_rerun_is_clean(tmpfs):
    """ENOSPC inside the toolchain mid-export: the room check passed (the disk had room when the
    convert began), then the disk filled while litert-torch traced the model. One line naming the
    disk, no float export recorded or stored, no scratch folder left; with the space back, the same
    command converts and builds."""
    fs = tmpfs(100)
    home = fs / "home"
    # The embedded default: the farm's local Prefect server, its database under FARM_HOME on the
    # disk that fills (Prefect's temporary per-command server prints its own errors to the terminal).
    env = farm_env(home, FARM_PREFECT_SERVER="local", FARM_PREFECT_PORT=str(free_port()), **CONVERTER_RUNS)
    try:
        _fill_during_export(fs, home, env)
    finally:
        run_farm(["server", "stop"], env)


def _fill_during_export(fs: Path, home: Path, env: dict[str, str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "farm_cli", "build", str(REPO / "examples" / "tiny-llama.yaml"),
                             "--no-gates", "--no-bench"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not any("stage convert started" in p.read_text(errors="replace") for p in (home / "logs").glob("farm-*.log")):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the convert never started"
        time.sleep(0.05)
    _fill(fs)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err[-3000:]
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    line = _one_line(done)
    assert line.startswith("error: ") and "the disk is full under" in line and str(fs) in line, line
    assert len([ln for ln in err.splitlines() if ln.startswith("error")]) == 1, err[-3000:]
    (fs / "filler-late").unlink()
    assert not list((home / "work").glob("convert-*")), list((home / "work").iterdir())
    tmp = home / "store" / "tmp"
    assert not tmp.exists() or not any(tmp.iterdir()), list(tmp.iterdir())
    again = run_farm(["build", str(REPO / "examples" / "tiny-llama.yaml"), "--no-gates", "--no-bench", "--json"], env)
    assert again.returncode == 0, again.stderr[-3000:]
    stages = {s["name"]: s["status"] for s in json.loads(again.stdout)["stages"]}
    assert stages["convert"] == "ran", stages  # nothing of the failed export was kept as a result
