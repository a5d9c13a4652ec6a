"""Database faults are data, not tracebacks: a private PostgreSQL cluster (initdb + pg_ctl in a temp
dir, so the shared server is never touched) stopped and restarted under a running farm; an
unreachable URL, a missing database and a FARM_HOME that is a file each give one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from farmtest import REPO, free_port
from farm.lineage.db import Database, LineageUnavailable

BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)


def _as_postgres(*args: str, **kw) -> subprocess.CompletedProcess:
    cmd = list(args)
    if os.geteuid() == 0:  # initdb and postgres refuse to run as root
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


class Cluster:
    def __init__(self, root: Path):
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def ctl(self, *args: str) -> None:
        proc = _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def start(self) -> None:
        self.ctl("-o", f"-p {self.port} -k /tmp -c listen_addresses=127.0.0.1", "start")

    def stop(self) -> None:
        self.ctl("-m", "fast", "stop")


@pytest.fixture
def cluster():
    if BIN is None or not (BIN / "initdb").exists():
        pytest.skip("PostgreSQL server binaries not installed")
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="farm-pg-"))
    os.chmod(root, 0o755)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    proc = _as_postgres(str(BIN / "initdb"), "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    assert proc.returncode == 0, proc.stderr
    c = Cluster(root)
    c.start()
    try:
        yield c
    finally:
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(c.data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


def test_a_database_restart_costs_a_pause_not_the_work(cluster, monkeypatch):
    monkeypatch.setenv("FARM_DB_RETRY_SECONDS", "30")
    db = Database(cluster.url)
    with db.session() as s:
        assert s.execute(__import__("sqlalchemy").text("SELECT count(*) FROM artifacts")).scalar() == 0
    cluster.stop()
    threading.Timer(4.0, cluster.start).start()
    t0 = time.monotonic()
    with db.session() as s:  # the pooled connection is dead; a new one waits for the server
        assert s.execute(__import__("sqlalchemy").text("SELECT 1")).scalar() == 1
    assert time.monotonic() - t0 >= 3.0


def test_a_database_that_stays_down_is_one_error(cluster, monkeypatch):
    monkeypatch.setenv("FARM_DB_RETRY_SECONDS", "1")
    db = Database(cluster.url)
    cluster.stop()
    with pytest.raises(LineageUnavailable, match="is unavailable: .*is the server running"):
        with db.session() as s:
            s.execute(__import__("sqlalchemy").text("SELECT 1"))
    cluster.start()


def _farm(args: list[str], **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "PREFECT_"))}
    base["FARM_PREFECT_SERVER"] = "temporary"  # leave no background server running (conftest.farm_env)
    return subprocess.run([sys.executable, "-m", "farm_cli", *args], env={**base, **env}, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _one_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> None:
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode == code, proc.stderr[-2000:]
    assert len(errors) == 1 and all(w in errors[0] for w in words), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_unreachable_missing_and_impossible_databases_are_one_line(cluster, tmp_path):
    home = str(tmp_path / "home")
    port = free_port()
    _one_error(_farm(["artifacts"], FARM_HOME=home, FARM_DB_RETRY_SECONDS="1",
                     FARM_DATABASE_URL=f"postgresql+psycopg://postgres@127.0.0.1:{port}/farm"),
               1, "unavailable", "is the server running")
    _one_error(_farm(["artifacts"], FARM_HOME=home, FARM_DATABASE_URL=cluster.url.rsplit("/", 1)[0] + "/nope"),
               1, "does not exist", "createdb")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    _one_error(_farm(["artifacts"], FARM_HOME=str(not_a_dir)), 2, "FARM_HOME")
    _one_error(_farm(["artifacts"], FARM_HOME=home, FARM_DATABASE_URL="nosuchdriver://x/y"), 2, "FARM_DATABASE_URL")


def test_an_unexpected_failure_is_one_line_with_the_path_of_its_full_log(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "lineage.db").write_bytes(os.urandom(4096))  # not a database: no error the farm expects
    proc = _farm(["artifacts"], FARM_HOME=str(home))
    _one_error(proc, 1, "unexpected", "full log:", "--debug")
    log = Path(proc.stderr.split("full log: ", 1)[1].split(";", 1)[0])
    assert log.is_file() and log.parent == home / "logs" and "Traceback" in log.read_text()
    assert "Traceback" in _farm(["--debug", "artifacts"], FARM_HOME=str(home)).stderr
