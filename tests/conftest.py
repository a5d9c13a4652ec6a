"""Shared fixtures."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def aws_env() -> Iterator[None]:
    """Dummy AWS credentials for the session, and no reading of ~/.aws (moto accepts any keys)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
    mp.setenv("AWS_CONFIG_FILE", os.devnull)
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    for var in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        mp.delenv(var, raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def s3_server(aws_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real moto S3 server over HTTP in its own process; yields its endpoint URL."""
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    for _attempt in range(3):  # the free port can be taken between probe and bind
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            proc.kill()
            proc.wait()
            continue
        break
    else:
        pytest.fail(f"moto server did not start; its log:\n{log_path.read_text(errors='replace')}")
    try:
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Terminate a test server, killing it if it does not exit in time."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- the farm's own fixtures: PostgreSQL, a Prefect server, the toolchain, one shared real build ---


REPO = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get("FARM_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def pg_factory():
    """Makes fresh PostgreSQL databases on the local server (127.0.0.1:5432, trust auth); all are
    dropped at the end of the session."""
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def make() -> str:
        name = f"farm_test_{secrets.token_hex(4)}"
        try:
            with admin.connect() as c:
                c.execute(text(f'CREATE DATABASE "{name}"'))
        except Exception as exc:  # noqa: BLE001
            if os.environ.get("CI"):
                raise
            pytest.skip(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}")
        made.append(name)
        return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"

    yield make
    with admin.connect() as c:
        for name in made:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def pg_url(pg_factory):
    """One fresh PostgreSQL database for the session."""
    return pg_factory()


@pytest.fixture(scope="session")
def toolchain_python() -> str:
    """The toolchain env `make setup` installed (or FARM_TOOLCHAIN_PYTHON)."""
    from farm.settings import Settings
    from farm.toolchain import Toolchain

    tc = Toolchain(Settings())
    if not tc.is_installed():
        pytest.fail(f"toolchain env not installed at {tc.env_dir}: run `make toolchain`")
    return str(tc.python)


def start_prefect_server(home: Path, **env_extra: str) -> tuple[subprocess.Popen, str, Any]:
    """`prefect server start` on a free loopback port with PREFECT_HOME=home (and env_extra, e.g. a
    PostgreSQL database); returns (process, API URL, its open log file) once /health answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update({"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **env_extra})
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
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


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real Prefect server (not the ephemeral one), so flows in tests start in ~2 s."""
    proc, url, log = start_prefect_server(tmp_path_factory.mktemp("prefect-home"))
    yield url
    stop(proc, timeout=15)
    log.close()


def farm_env(home: Path, prefect_url: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "PREFECT_"))}
    # A test's command must leave nothing running: without a server given, Prefect's temporary
    # per-command server (tests/test_server.py covers the farm's background one).
    env.update({"FARM_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "FARM_PREFECT_SERVER": "temporary"})
    if os.environ.get("FARM_CACHE"):
        env["FARM_CACHE"] = os.environ["FARM_CACHE"]
    if os.environ.get("FARM_TOOLCHAIN_PYTHON"):
        env["FARM_TOOLCHAIN_PYTHON"] = os.environ["FARM_TOOLCHAIN_PYTHON"]
    if prefect_url:
        env["PREFECT_API_URL"] = prefect_url
    env.update(extra)
    return env


def run_farm(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, exactly as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "farm.cli", *args], env=env, cwd=REPO,
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


@pytest.fixture(scope="session")
def built(tmp_path_factory, prefect_server, toolchain_python) -> Built:
    home = tmp_path_factory.mktemp("farm-home")
    env = farm_env(home, prefect_server)
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--json"], env)
    assert proc.returncode == 0, f"build failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return Built(home, env, json.loads(proc.stdout), proc)
