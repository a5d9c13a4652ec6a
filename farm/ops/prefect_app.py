"""The farm's local Prefect server: Prefect's own app (what `prefect server start` serves, with its
services), run by uvicorn, that retries its own "database is locked" answers before giving them.

Prefect's server on SQLite answers some writes with 503 "Service Unavailable" when SQLite says
"database is locked": creating a task run reads first and then inserts, and when the server's own
task-run recorder commits in between, SQLite fails the insert at once (a deferred transaction
cannot upgrade past a newer commit; the busy timeout does not apply). PrefectHQ/prefect#18934.
The client retries after 2**n seconds (1, 2, 4, … with jitter): measured here, each subflow of a
build (gate suite, fan-out) and often the first stage waited ~2 s for it, 4.5 s of a 6.9 s no-op
build. The race is usually over a moment later.

So the server retries the request itself, a few times with short escalating jittered pauses
(RETRY_DELAYS_S: ~3 s in all), before the 503 reaches the client, whose own backoff then still
covers a lock that lasts longer. (A `Retry-After: 0.1` on the 503s instead was tried and reverted:
four concurrent builds on one server used up the client's five retries inside the lock in ~0.6 s.)
Retrying is what the client would do: a 503 here is a rolled-back transaction.

    python -m uvicorn --factory farm.ops.prefect_app:create_app --host 127.0.0.1 --port PORT
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from typing import Any, Awaitable, Callable

#: Pauses before each retry of a 503 (each × a random 0.5-1.5): ~3.2 s in all, then the 503 goes out.
RETRY_DELAYS_S = (0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6)

log = logging.getLogger("farm.ops.prefect_app")

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class RetryUnavailable:
    """ASGI middleware: an HTTP request the app answers 503 is run again (its body replayed) after a
    short pause, RETRY_DELAYS_S; the last attempt's answer goes out whatever it is. Nothing of a
    retried answer reaches the client. Other scopes (websockets, lifespan) pass through."""

    def __init__(self, app: Any, delays: tuple[float, ...] = RETRY_DELAYS_S):
        self.app = app
        self.delays = delays
        self.retried = 0  # requests answered after at least one retry (for tests and logs)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body: list[Message] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before its body arrived
                return
            body.append(message)
            if not message.get("more_body"):
                break
        for attempt in range(len(self.delays) + 1):
            last = attempt == len(self.delays)
            replay = list(body)

            async def receive_again() -> Message:
                # the body once; after it, the real channel (a disconnect, for a streaming answer)
                return replay.pop(0) if replay else await receive()

            unavailable = False

            async def send_unless_unavailable(message: Message) -> None:
                nonlocal unavailable
                if message["type"] == "http.response.start" and message["status"] == 503:
                    if not last:
                        unavailable = True
                    else:
                        log.warning("%s %s: still 503 after %d retries in the server; the client backs off",
                                    scope.get("method"), scope.get("path"), len(self.delays))
                if not unavailable:
                    await send(message)

            try:
                # A copy each time: Starlette's routers update the scope in place (a mount's
                # root_path), and a second pass over the same dict matched no route (404).
                await self.app(dict(scope), receive_again, send_unless_unavailable)
            except Exception:
                # Starlette's error middleware re-raises after sending its (503) answer.
                if not unavailable:
                    raise
            if not unavailable:
                if attempt:
                    self.retried += 1
                return
            await asyncio.sleep(self.delays[attempt] * random.uniform(0.5, 1.5))


def create_app() -> RetryUnavailable:
    """uvicorn's factory: Prefect's server app (final: no later instance reconfigures it) with its
    services, behind `RetryUnavailable`."""
    from prefect.server.api.server import create_app as prefect_app

    return RetryUnavailable(prefect_app(final=True))


def server_command(host: str, port: int) -> list[str]:
    """The command that serves it (what `prefect server start` runs, with this factory)."""
    # asyncio and h11, as Prefect's own `prefect server start` runs where uvloop and httptools are
    # not installed: the orchestrator env has them for `farm api`, and uvicorn would pick them here.
    return [sys.executable, "-m", "uvicorn", "--factory", "farm.ops.prefect_app:create_app", "--host", host,
            "--port", str(port), "--timeout-keep-alive", "5", "--ws-ping-interval", "20", "--ws-ping-timeout", "20",
            "--log-level", "warning", "--loop", "asyncio", "--http", "h11"]
