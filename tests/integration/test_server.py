"""The embedded default's Prefect server (farm/ops/server.py): `farm server start|status|stop`, started
on first use by a command that runs a flow, reused by the next one, its flow runs kept (the UI's)."""

from __future__ import annotations

import json

import httpx
import pytest

from farmtest import free_port, run_farm, wait_for_flow_run


@pytest.fixture
def local_env(built, tmp_path):
    """The session build's farm, but no PREFECT_API_URL: its own background server on a free port."""
    env = {k: v for k, v in built.env.items() if k not in ("PREFECT_API_URL", "FARM_PREFECT_SERVER")}
    env["FARM_PREFECT_PORT"] = str(free_port())
    yield env
    run_farm(["server", "stop"], env)


@pytest.mark.slow
def test_first_command_starts_the_server_and_the_next_reuses_it(local_env):
    env = local_env
    assert run_farm(["server", "status"], env).returncode == 1
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--no-gates", "--json"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = json.loads(run_farm(["server", "status", "--json"], env).stdout)
    assert status["running"] is True and status["home"].endswith("prefect")
    again = run_farm(["build", "examples/tiny-qwen35.yaml", "--no-gates", "--json"], env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(run_farm(["server", "status", "--json"], env).stdout)["pid"] == status["pid"]
    # Both builds are flow runs on that server: what its UI lists.
    runs = httpx.post(f"{status['api_url']}/flow_runs/filter", timeout=30,
                      json={"flows": {"name": {"any_": ["build"]}}}).json()
    assert len([r for r in runs if r["state_type"] == "COMPLETED"]) == 2
    started = run_farm(["server", "start"], env)
    assert started.returncode == 0 and "already running" in started.stdout
    assert run_farm(["server", "stop"], env).stdout.strip() == "stopped"
    assert run_farm(["server", "status"], env).returncode == 1


def test_a_port_in_use_by_something_else_is_one_clear_line(tmp_path):
    """Something that is not a Prefect server holds the port: the start fails naming the port and
    the log, it does not hang or fall back silently."""
    import socket
    import sys
    import subprocess

    from farmtest import REPO, farm_env

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    env = {k: v for k, v in farm_env(tmp_path / "home").items() if k != "FARM_PREFECT_SERVER"}
    env["FARM_PREFECT_PORT"] = str(port)
    try:
        proc = subprocess.run([sys.executable, "-m", "farm_cli", "server", "start"], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=200)
    finally:
        sock.close()
        run_farm(["server", "stop"], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"port {port}" in proc.stderr and "prefect-server.log" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_build_started_from_the_ui_runs_on_the_served_deployment(local_env):
    """The UI path: `farm server start` serves the deployments; a run of `build` created through the
    Prefect API with the typed form's parameters (as the UI's Run button does) is picked up by the
    served runner, completes, and its bundle is in lineage."""
    import time

    env = local_env
    started = run_farm(["server", "start", "--json"], env)
    assert started.returncode == 0, started.stderr
    api = json.loads(started.stdout)["api_url"]
    deadline = time.monotonic() + 120
    while True:  # the runner registers its deployments once it is up
        r = httpx.get(f"{api}/deployments/name/build-model/build", timeout=10)
        if r.status_code == 200:
            break
        assert time.monotonic() < deadline, "the served build deployment never appeared"
        time.sleep(1)
    dep = r.json()
    # The form: a dropdown of shipped configs and of recipes, not a path box.
    schema = dep["parameter_openapi_schema"]
    defs = schema.get("definitions") or schema.get("$defs")
    assert "tiny-qwen35" in defs["ModelChoice"]["enum"] and "dynamic_wi8_afp32" in defs["RecipeChoice"]["enum"]
    run = httpx.post(f"{api}/deployments/{dep['id']}/create_flow_run", timeout=10, json={"parameters": {"params": {
        "model": "tiny-qwen35", "recipe": "qwen35_wi8_float_gates", "run_gates": False, "run_devices": False}}}).json()
    done = wait_for_flow_run(api, run["id"], 600)
    assert done["state_type"] == "COMPLETED", done["state"]
    arts = json.loads(run_farm(["artifacts", "--kind", "litertlm", "--model", "tiny-qwen35", "--json"], env).stdout)
    assert arts["artifacts"], "the UI's build recorded no bundle"


def test_a_server_this_farm_did_not_start_is_not_used(tmp_path):
    """Another Prefect-like server already answers on the port (another farm's, a hand-started one):
    the farm refuses in one line instead of recording its runs in someone else's database."""
    import subprocess
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from farmtest import REPO, farm_env

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"true")

        def log_message(self, *_a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {k: v for k, v in farm_env(tmp_path / "home").items() if k != "FARM_PREFECT_SERVER"}
    env["FARM_PREFECT_PORT"] = str(server.server_address[1])
    try:
        proc = subprocess.run([sys.executable, "-m", "farm_cli", "server", "start"], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
    assert proc.returncode == 1 and "did not start" in proc.stderr and "FARM_PREFECT_PORT" in proc.stderr
    assert proc.stderr.count("\n") == 1


def _alive(pid: int | None) -> bool:
    import os

    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped by whoever adopted it) is not left running
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_server_killed_mid_build_is_one_line_and_the_next_command_brings_back_one_server_and_one_runner(
        local_env, tmp_path):
    """kill -9 of the farm's own Prefect server while a build converts: the stages still finish and
    are recorded (lineage is the farm's), the command ends in one line naming the server and what to
    do, without Prefect's event dumps (issue 19: 24.6 KB of them, then 'unexpected ConnectError'); the
    next command starts the server again with one runner (the old one stopped), reuses the stages,
    and `farm server stop` leaves nothing running. Another home's server on the port is told apart."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    from farmtest import CONVERTER_RUNS, REPO

    env = {**local_env, **CONVERTER_RUNS}  # the kill lands mid-convert: litert-torch runs, not a replay
    started = json.loads(run_farm(["server", "start", "--json"], env).stdout)
    old_runner = started["runner_pid"]
    proc = subprocess.Popen([sys.executable, "-m", "farm_cli", "build", "examples/tiny-llama.yaml", "--no-gates",
                             "--no-bench"], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    source_done = threading.Event()

    def watch() -> None:
        for text in proc.stderr:
            lines.append(text)
            if "stage  source" in text:
                source_done.set()

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    assert source_done.wait(300), "".join(lines)
    os.killpg(started["pid"], signal.SIGKILL)  # the server, mid-convert
    assert proc.wait(timeout=600) == 1
    reader.join(timeout=10)
    err = "".join(lines)
    assert "stage  hash" in err, err  # every stage finished and was recorded
    assert lines[-1].startswith("error: the farm's Prefect server at ") and "stopped answering" in lines[-1], err
    assert "prefect-server.log" in lines[-1] and "run the command again" in lines[-1]
    assert "Event(" not in err and "Error logging to API" not in err and "Traceback" not in err, err
    assert len(err) < 3000, err
    again = run_farm(["build", "examples/tiny-llama.yaml", "--no-gates", "--no-bench", "--json"], env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {s["name"]: s["status"] for s in json.loads(again.stdout)["stages"]}["hash"] == "cached"
    now = json.loads(run_farm(["server", "status", "--json"], env).stdout)
    assert now["running"] and now["pid"] != started["pid"] and now["runner_pid"] != old_runner
    assert not _alive(old_runner), "the dead server's runner was left running beside the new one"
    # Another FARM_HOME on the same port: told apart, not claimed.
    other = {**env, "FARM_HOME": str(tmp_path / "other-home")}
    foreign = run_farm(["server", "status"], other)
    assert foreign.returncode == 1 and "did not start" in foreign.stdout, foreign.stdout
    assert json.loads(run_farm(["server", "status", "--json"], other).stdout)["foreign"] is True
    assert run_farm(["server", "stop"], env).stdout.strip() == "stopped"
    assert not _alive(now["pid"]) and not _alive(now["runner_pid"])
