"""farm/prefect_app.py: the farm's Prefect server says when to retry a 503 (Prefect's answer to
SQLite's 'database is locked'), so the client retries after 0.1 s instead of its 2 s backoff."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from farm.prefect_app import RetrySoon, server_command


def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/task_runs/")
    def locked() -> JSONResponse:
        return JSONResponse({"exception_message": "Service Unavailable"}, status_code=503)

    @app.get("/busy")
    def busy() -> JSONResponse:
        return JSONResponse({}, status_code=503, headers={"Retry-After": "7"})

    @app.get("/health")
    def health() -> bool:
        return True

    return app


def test_a_503_carries_retry_after_and_other_answers_are_untouched():
    client = TestClient(RetrySoon(_app()))
    r = client.post("/task_runs/")
    assert r.status_code == 503 and r.headers["retry-after"] == "0.1"
    assert r.json() == {"exception_message": "Service Unavailable"}
    assert client.get("/busy").headers["retry-after"] == "7"  # a server's own delay is kept
    ok = client.get("/health")
    assert ok.status_code == 200 and "retry-after" not in ok.headers


def test_negative_control_prefects_own_503_names_no_delay():
    # What the client sees without the middleware: no Retry-After, so it backs off 2**n seconds.
    assert "retry-after" not in TestClient(_app()).post("/task_runs/").headers


def test_the_server_command_serves_the_factory():
    cmd = server_command("127.0.0.1", 4277)
    assert cmd[cmd.index("--factory") + 1] == "farm.prefect_app:create_app"
    assert cmd[cmd.index("--port") + 1] == "4277"
