"""farm/ops/prefect_app.py: the farm's Prefect server retries its own 503s (Prefect's answer to SQLite's
'database is locked') before the client's 2**n backoff would, replaying the request's body."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from farm.ops.prefect_app import RetryUnavailable, server_command

FAST = (0.001, 0.001, 0.001)


def _app(locked_times: int) -> tuple[FastAPI, list[bytes]]:
    """Prefect's shape: the API is a FastAPI app mounted under /api of another."""
    app, api = FastAPI(), FastAPI()
    app.mount("/api", api)
    seen: list[bytes] = []

    @api.post("/task_runs/")
    async def create(request: Request) -> JSONResponse:
        seen.append(await request.body())
        if len(seen) <= locked_times:
            return JSONResponse({"exception_message": "Service Unavailable"}, status_code=503)
        return JSONResponse({"created": (await request.json())["name"]}, status_code=201)

    @api.get("/health")
    def health() -> bool:
        return True

    return app, seen


def test_a_503_is_retried_with_the_same_body_and_the_client_sees_the_answer():
    app, seen = _app(locked_times=2)
    mw = RetryUnavailable(app, FAST)
    r = TestClient(mw).post("/api/task_runs/", json={"name": "gate x"})
    assert r.status_code == 201 and r.json() == {"created": "gate x"}
    assert len(seen) == 3 and len(set(seen)) == 1  # the body replayed each time
    assert mw.retried == 1
    ok = TestClient(mw).get("/api/health")
    assert ok.status_code == 200 and mw.retried == 1


def test_a_lock_that_outlasts_the_retries_goes_out_as_the_503():
    app, seen = _app(locked_times=100)
    r = TestClient(RetryUnavailable(app, FAST)).post("/api/task_runs/", json={"name": "x"})
    assert r.status_code == 503 and r.json() == {"exception_message": "Service Unavailable"}
    assert len(seen) == len(FAST) + 1


def test_negative_control_without_it_the_first_503_reaches_the_client():
    app, seen = _app(locked_times=1)
    assert TestClient(app).post("/api/task_runs/", json={"name": "x"}).status_code == 503 and len(seen) == 1


def test_an_error_raised_after_its_503_is_retried_not_raised():
    import asyncio

    # Starlette's ServerErrorMiddleware sends the handler's 503, then raises the exception again.
    calls = []

    async def app(scope, receive, send):
        calls.append((await receive())["body"])
        if len(calls) == 1:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            raise RuntimeError("database is locked")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent = []

    async def send(message):
        sent.append(message)

    body = [{"type": "http.request", "body": b"a", "more_body": True}, {"type": "http.request", "body": b"b"}]

    async def receive():
        return body.pop(0)

    # a body in two parts: the app's one receive() gets the first part, each time
    asyncio.run(RetryUnavailable(app, FAST)({"type": "http", "method": "POST", "path": "/"}, receive, send))
    assert calls == [b"a", b"a"]
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [200]


def test_the_server_command_serves_the_factory():
    cmd = server_command("127.0.0.1", 4277)
    assert cmd[cmd.index("--factory") + 1] == "farm.ops.prefect_app:create_app"
    assert cmd[cmd.index("--port") + 1] == "4277"
