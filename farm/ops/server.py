"""The embedded default's Prefect server: started in the background on first use, its state under
FARM_HOME/prefect, on 127.0.0.1 at FARM_PREFECT_PORT, reused by every later command (`farm server
start|stop|status`). Before it, each command started a temporary server (6-7 s of every command)
and the UI was gone when the command ended.

`PREFECT_API_URL` in the environment still points everything at another server (production), and
FARM_PREFECT_SERVER=temporary keeps Prefect's per-command temporary server (the test-suite uses it
for commands that must leave nothing running).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, MutableMapping

from farm.errors import BuildFailed
from farm.ops.prefect_app import server_command
from farm.settings import Settings

START_TIMEOUT_S = 120.0


def api_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.prefect_port}/api"


def ui_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.prefect_port}"


def _pid_file(settings: Settings, what: str = "server") -> Path:
    return settings.prefect_home / f"{what}.pid"


def _log_file(settings: Settings, what: str = "server") -> Path:
    return settings.home / "logs" / f"prefect-{what}.log"


def _healthy(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def _pid(settings: Settings, what: str = "server") -> int | None:
    try:
        pid = int(_pid_file(settings, what).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def status(settings: Settings) -> dict[str, Any]:
    """`running`: this FARM_HOME's server answers; `foreign`: something answers on its port that this
    FARM_HOME did not start (another home's server, a hand-started one), which it will not use."""
    url = api_url(settings)
    pid = _pid(settings)
    answers = _healthy(url)
    return {"running": answers and pid is not None, "foreign": answers and pid is None, "pid": pid, "api_url": url,
            "ui_url": ui_url(settings), "home": str(settings.prefect_home), "log": str(_log_file(settings)),
            "runner_pid": _pid(settings, "runner"), "runner_log": str(_log_file(settings, "runner"))}


def start(settings: Settings, serve: bool = True) -> dict[str, Any]:
    """Start the server unless it is up; wait until it answers; and (serve) the runner that serves
    the UI's deployments (flows/serve.py), so "Run" in the UI works. One starter at a time (a file
    lock): concurrent first commands share one server."""
    settings.prefect_home.mkdir(parents=True, exist_ok=True)
    url = api_url(settings)
    if _healthy(url) and _pid(settings) is None:
        # Something answers on the port, but this FARM_HOME did not start it (another farm's server,
        # a hand-started one): its runs would land in someone else's Prefect database.
        raise BuildFailed(f"127.0.0.1:{settings.prefect_port} answers as a Prefect server this FARM_HOME did not "
                          f"start ({settings.home}): set FARM_PREFECT_PORT to a free port, or PREFECT_API_URL to "
                          "use that server")
    if _healthy(url) and (not serve or _pid(settings, "runner")):
        return {**status(settings), "started": False}
    with open(settings.prefect_home / ".server-start.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _healthy(url):
                if serve and _pid(settings, "runner") is None:
                    _spawn_runner(settings)
                return {**status(settings), "started": False}
            if (pid := _pid(settings)) is None:
                pid = _spawn(settings)
                # A new server: the runner of the old one (if it outlived it) goes with it.
                _stop_pid(settings, "runner", 10.0)
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _healthy(url, timeout=2):
                if _exited(pid) or _pid(settings) is None:
                    raise BuildFailed(f"the farm's Prefect server exited while starting on port {settings.prefect_port} "
                                      f"(another program on that port? set FARM_PREFECT_PORT): see {_log_file(settings)}")
                if time.monotonic() > deadline:
                    raise BuildFailed(f"the farm's Prefect server did not answer on {url} within {START_TIMEOUT_S:.0f} s: "
                                      f"see {_log_file(settings)}")
                time.sleep(0.3)
            if serve:
                _spawn_runner(settings)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return {**status(settings), "started": True}


def _exited(pid: int) -> bool:
    """Whether a child this process started has exited (reaping it); False for another's process."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


def _spawn(settings: Settings) -> int:
    log = _log_file(settings)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(settings.prefect_home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_COLORS="false",
               # The UI asks this address for its API (the default is port 4200: on any other port
               # the UI loads and then says "Can't connect to Server API", measured).
               PREFECT_UI_API_URL=api_url(settings), PREFECT_SERVER_UI_API_URL=api_url(settings))
    with open(log, "ab") as out:
        # Prefect's app as `prefect server start` serves it, which retries its own 'database is
        # locked' 503s before the client's 2 s backoff would (farm/ops/prefect_app.py).
        proc = subprocess.Popen(
            server_command("127.0.0.1", settings.prefect_port),
            env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives the command that started it; Ctrl-C there does not stop it
        )
    _pid_file(settings).write_text(f"{proc.pid}\n")
    return proc.pid


def _spawn_runner(settings: Settings) -> int:
    """`python -m flows.serve` against this server, with this farm's settings (FARM_* inherited). One
    runner per server: a runner left from a server that died is stopped first (a restarted server
    got a second runner beside the first, which `farm server stop` then missed)."""
    _stop_pid(settings, "runner", 10.0)
    log = _log_file(settings, "runner")
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_API_URL=api_url(settings), PREFECT_HOME=str(settings.prefect_home),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_COLORS="false",
               FARM_HOME=str(settings.home), FARM_PREFECT_PORT=str(settings.prefect_port))
    repo = Path(__file__).resolve().parents[1]
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "flows.serve"], env=env, cwd=repo, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    _pid_file(settings, "runner").write_text(f"{proc.pid}\n")
    return proc.pid


def _stop_pid(settings: Settings, what: str, timeout: float) -> bool:
    pid = _pid(settings, what)
    if pid is None:
        _pid_file(settings, what).unlink(missing_ok=True)
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    _wait_gone(pid, timeout)
    if not _gone(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # SIGKILL is delivered, not done: a caller that starts a new server next must not find the
        # old one still holding its port or answering kill(pid, 0).
        _wait_gone(pid, 5.0)
    _pid_file(settings, what).unlink(missing_ok=True)
    return True


def _gone(pid: int) -> bool:
    """The process has exited: reaped (a child of this process), no longer there, or a zombie whose
    parent has not reaped it yet (it holds no port and runs nothing)."""
    if _exited(pid):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.2)


def stop(settings: Settings, timeout: float = 20.0) -> dict[str, Any]:
    _stop_pid(settings, "runner", timeout)
    return {**status(settings), "stopped": _stop_pid(settings, "server", timeout)}


def ensure_api(settings: Settings, environ: MutableMapping[str, str]) -> str | None:
    """Before Prefect is imported: the API every flow of this command talks to, set in the process
    environment `environ` (farm/ops/bootstrap.py). PREFECT_API_URL wins; else the farm's own local
    server (started if needed); None with FARM_PREFECT_SERVER=temporary (Prefect's temporary
    per-command server)."""
    if environ.get("PREFECT_API_URL"):
        return environ["PREFECT_API_URL"]
    if settings.prefect_server == "temporary":
        return None
    start(settings)
    environ["PREFECT_API_URL"] = api_url(settings)
    # The farm's own server is on this machine: a refused connection means it is gone, not busy.
    # Prefect's default 5 retries with backoff spent ~2.5 min before the command could say so.
    environ.setdefault("PREFECT_CLIENT_MAX_RETRIES", "2")
    return environ["PREFECT_API_URL"]


def lost(settings: Settings, environ: MutableMapping[str, str], exc: BaseException) -> str | None:
    """The one line for a command whose Prefect server stopped answering (a connection refused or
    reset to its API), naming the server and what to do; None for any other failure."""
    import httpx

    url = environ.get("PREFECT_API_URL")
    if not url or not isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError)):
        return None
    ours = url == api_url(settings)
    where = (f"the farm's Prefect server at {url} (FARM_HOME {settings.home}; its log: {_log_file(settings)})" if ours
             else f"the Prefect server at {url} (PREFECT_API_URL)")
    again = ("run the command again: it starts the server and reuses every stage already recorded" if ours
             else "bring that server back, then run the command again: finished stages are reused")
    return (f"{where} stopped answering during the command ({type(exc).__name__}: {str(exc)[:120]}); "
            f"the stages reported above are recorded in lineage; {again}")
