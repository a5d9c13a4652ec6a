"""What the tests share besides fixtures (tests/conftest.py): the repository's paths, free ports,
the real CLI in a subprocess on a farm of its own, a real Prefect server, stopping test servers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


_PORTS_BELOW = 32768  # Linux's ephemeral range starts here: outbound sockets and bind(0) never take ours
_PORTS_FROM = 20000
_next_port: int | None = None


def free_port() -> int:
    """A loopback port free now that no other xdist worker will hand out and no bind(0) will take.

    bind(0) alone raced: a port chosen here for a server that starts later was handed to another
    worker's sshd in between (CI, 2026-12-07: a build met "SSH-2.0-OpenSSH" on its Prefect port). Each
    worker owns a slice of the range below the ephemeral ports and walks it, never reusing a port."""
    global _next_port
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    width = (_PORTS_BELOW - _PORTS_FROM) // 8
    low = _PORTS_FROM + (index % 8) * width
    if _next_port is None:
        _next_port = low + (os.getpid() % width)  # a rerun in the same slice starts elsewhere
    for _ in range(width):
        port = low + (_next_port - low) % width
        _next_port = port + 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {low}-{low + width - 1}")


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Terminate a test server, killing it if it does not exit in time."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_prefect_server(home: Path, **env_extra: str) -> tuple[subprocess.Popen, str, Any]:
    """Prefect's server as the farm runs it (farm/ops/prefect_app.py) on a free loopback port with
    PREFECT_HOME=home (and env_extra, e.g. a PostgreSQL database); returns (process, API URL, its open log file) once /health answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update({"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **env_extra})
    log = open(home / "server.log", "wb")
    from farm.ops.prefect_app import server_command  # what the farm's own server runs

    proc = subprocess.Popen(server_command("127.0.0.1", port), env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url, log
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.close()
            raise RuntimeError(f"prefect server did not start: see {home / 'server.log'}")
        time.sleep(0.5)


def wait_for_flow_run(api: str, run_id: str, timeout: float = 600, why=lambda: "") -> dict:
    """Poll a flow run until it is final; returns it (a timeout fails the test with `why()`)."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        run = httpx.get(f"{api}/flow_runs/{run_id}", timeout=10).json()
        if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return run
        assert time.monotonic() < deadline, f"the run is still {run['state_type']} {why()}"
        time.sleep(2)


# This host's class only (tests/data/devices-host.yaml): the CPU-class tests name their registry.
HOST_ONLY_DEVICES = Path(__file__).resolve().parents[1] / "data" / "devices-host.yaml"
SHIPPED_DEVICES = Path(__file__).resolve().parents[2] / "infra" / "devices.yaml"


# For tests that watch, interrupt or time the converter itself (kill or a signal mid-convert, a disk
# that fills during the export, a host killed holding the convert lease): no export replayed from
# the run's FARM_EXPORT_CACHE, litert-torch runs.
CONVERTER_RUNS = {"FARM_EXPORT_CACHE": ""}


def farm_env(home: Path, prefect_url: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "PREFECT_"))}
    # A test's command must leave nothing running: without a server given, Prefect's temporary
    # per-command server (tests/test_server.py covers the farm's background one).
    env.update({"FARM_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "FARM_PREFECT_SERVER": "temporary",
                "FARM_DEVICES_FILE": str(HOST_ONLY_DEVICES)})
    if os.environ.get("FARM_CACHE"):
        env["FARM_CACHE"] = os.environ["FARM_CACHE"]
    for name in ("FARM_TOOLCHAIN_PYTHON", "FARM_EXPORT_CACHE"):  # the run's export cache: tests/conftest.py
        if os.environ.get(name):
            env[name] = os.environ[name]
    if prefect_url:
        env["PREFECT_API_URL"] = prefect_url
    env.update(extra)
    return env


def run_farm(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, exactly as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "farm_cli", *args], env=env, cwd=REPO,
        capture_output=True, text=True, timeout=timeout,
    )


class Built:
    """The session's one real build of the tiny Qwen3.5 (shared by the slow tests)."""

    def __init__(self, home: Path, env: dict[str, str], summary: dict, proc: subprocess.CompletedProcess):
        self.home, self.env, self.summary, self.proc = home, env, summary, proc

    @property
    def sha256(self) -> str:
        return self.summary["artifact"]["sha256"]

    def farm(self, *args: str, **extra: str) -> subprocess.CompletedProcess:
        return run_farm(list(args), {**self.env, **extra})
