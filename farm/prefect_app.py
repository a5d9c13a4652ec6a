"""The farm's local Prefect server: Prefect's own app (what `prefect server start` serves, with its
services), run by uvicorn with one change to its answers.

Prefect's server on SQLite answers some writes with 503 "Service Unavailable" when SQLite says
"database is locked": creating a task run reads first and then inserts, and when the server's own
task-run recorder commits in between, SQLite fails the insert at once (a deferred transaction
cannot upgrade past a newer commit; the busy timeout does not apply). PrefectHQ/prefect#18934.
The client retries, after 2**n seconds of backoff when the answer names no delay: measured here,
each subflow of a build (gate suite, fan-out) and often the first stage waited ~2 s for it, 4.5 s
of a 6.9 s no-op build. The race is gone a moment later, so this server's 503s carry
`Retry-After: 0.1` (the client honours it: prefect/client/base.py) and the retry comes at once.

    python -m uvicorn --factory farm.prefect_app:create_app --host 127.0.0.1 --port PORT
"""

from __future__ import annotations

import sys
from typing import Any, Awaitable, Callable

RETRY_AFTER_S = "0.1"

Message = dict[str, Any]


class RetrySoon:
    """ASGI middleware: a 503 response gets `Retry-After` (unless it has one)."""

    def __init__(self, app: Any, seconds: str = RETRY_AFTER_S):
        self.app = app
        self.seconds = seconds.encode()

    async def __call__(self, scope: Message, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_retry_after(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 503:
                headers = list(message.get("headers") or [])
                if not any(k.lower() == b"retry-after" for k, _v in headers):
                    message = {**message, "headers": [*headers, (b"retry-after", self.seconds)]}
            await send(message)

        await self.app(scope, receive, send_with_retry_after)


def create_app() -> RetrySoon:
    """uvicorn's factory: Prefect's server app (final: no later instance reconfigures it) with its
    services, behind `RetrySoon`."""
    from prefect.server.api.server import create_app as prefect_app

    return RetrySoon(prefect_app(final=True))


def server_command(host: str, port: int) -> list[str]:
    """The command that serves it (what `prefect server start` runs in the background, this factory)."""
    return [sys.executable, "-m", "uvicorn", "--factory", "farm.prefect_app:create_app", "--host", host,
            "--port", str(port), "--timeout-keep-alive", "5", "--ws-ping-interval", "20", "--ws-ping-timeout", "20",
            "--log-level", "warning"]
