"""Lineage over HTTP: a read-only FastAPI service (`farm api`). The same answers as the CLI's
`--json`, from the same named queries (farm/lineage/queries/); no route writes.

    GET /artifacts/{sha256-or-prefix}   the record `farm lineage --json` prints
    GET /artifacts?model=&recipe=&kind=&limit=   newest first
    GET /sections/{sha256}              the files carrying that section byte for byte
    GET /cards/{model}                  the model's newest published card (card.json) and its files
    GET /health

Errors are JSON `{"error", "detail"}`: 400 a malformed sha256 or too-short prefix (or a bad query
value), 404 unknown, 409 an ambiguous prefix (with `candidates`), 503 the lineage DB unreachable.

Answers are kept until lineage changes: each request reads the lineage generation (one indexed
row, farm/lineage/db.py moves it in every transaction that writes something lineage shows) and
an answer made at that generation is served again as it was (one lookup took 14-21 ms of queries,
so 50 clients got 41 requests/s; benchmarks/load.py). Every answer carries `ETag: "<generation>"`;
a request whose `If-None-Match` names the current generation gets 304. An answer is never older
than the newest committed write at the moment its request arrived.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import Any, Callable

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from farm.errors import AmbiguousPrefix, BadInput, NotASha, StoreError, UnknownArtifact
from farm_common import wire
from farm.lineage.db import LineageUnavailable
from farm.resources import Resources

_FULL_SHA = re.compile(r"^[0-9a-f]{64}$")


def _encode(body: dict[str, Any]) -> bytes:
    """A record that is JSON already (the queries return plain dicts; a datetime as ISO 8601),
    serialized once: FastAPI's own path validates a returned dict against the annotation and walks
    it with jsonable_encoder, which cost a lineage record (gate metrics, evidence, sections) several
    ms a lookup."""
    return json.dumps(body, separators=(",", ":"),
                      default=lambda o: o.isoformat() if hasattr(o, "isoformat") else str(o)).encode()


class Answers:
    """Answers (JSON bytes) by request path and query, each valid while the lineage generation it
    was made at is current; least recently used dropped past `max_bytes`. Used from the event loop
    only (no lock)."""

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes = max_bytes
        self.generation: int | None = None
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0

    def get(self, key: str, generation: int) -> bytes | None:
        if generation != self.generation:  # lineage changed: nothing kept holds
            self._kept.clear()
            self._bytes = 0
            self.generation = generation
            return None
        body = self._kept.get(key)
        if body is not None:
            self._kept.move_to_end(key)
        return body

    def put(self, key: str, generation: int, body: bytes) -> None:
        if generation != self.generation or len(body) > self.max_bytes // 8:
            return
        old = self._kept.pop(key, None)
        self._bytes += len(body) - (len(old) if old is not None else 0)
        self._kept[key] = body
        while self._bytes > self.max_bytes and self._kept:
            self._bytes -= len(self._kept.popitem(last=False)[1])


def _error(status: int, kind: str, exc: BaseException, **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": kind, "detail": str(exc), **extra})


def _handler(status: int, kind: str):
    async def handle(_request: Request, exc: Exception) -> JSONResponse:
        extra = {"candidates": exc.candidates} if isinstance(exc, AmbiguousPrefix) else {}
        return _error(status, kind, exc, **extra)

    return handle


def make_app(res: Resources) -> FastAPI:
    """The app over one farm's resources (passed, so tests give it theirs)."""
    from farm import __version__
    from farm.lineage.queries.artifacts import ARTIFACT_KINDS, lineage_generation, list_artifacts
    from farm.lineage.queries.cards import latest_card
    from farm.lineage.queries.sections import section_carriers
    from farm.lineage.report import lineage_record

    app = FastAPI(title="litertlm-farm lineage", version=__version__,
                  description="Read-only lineage of every file the farm built: by sha256 or prefix, by "
                              "section, by model, and each model's published card.")

    # Starlette picks a handler by walking the exception's MRO: the BadInput subclasses keep their own status.
    for exc_type, status, kind in ((NotASha, 400, "bad_sha256"), (UnknownArtifact, 404, "not_found"),
                                   (AmbiguousPrefix, 409, "ambiguous_prefix"), (wire.BadInput, 400, "bad_request"),
                                   (LineageUnavailable, 503, "lineage_unavailable"),
                                   (StoreError, 503, "store_unavailable")):
        app.add_exception_handler(exc_type, _handler(status, kind))

    answers = Answers()
    # Answers are made one at a time per process. A lookup is ~14 statements, each releasing and
    # retaking the GIL: with 10 made at once in one process (Starlette's pool allows 40) each
    # retake waited on the others, and 10 clients got half the requests/s of one (p50 74 ms,
    # benchmarks/load.py). More processes (`farm api --workers`) use more cores.
    making = None

    async def kept(request: Request, make: Callable[[Any], dict[str, Any]]) -> Response:
        """The answer `make(session)` gives, as kept at the current lineage generation. The
        generation is read and, on a miss, the answer made in one read-only session in a worker
        thread (the queries block): one connection checkout per request (PostgreSQL pings each
        checkout) and the event loop never waits on the database. `answers` is only used in that
        thread, under the limiter of one."""
        import anyio

        nonlocal making
        if making is None:  # made in the running event loop (anyio's limiter belongs to one)
            making = anyio.CapacityLimiter(1)
        key = f"{request.url.path}?{request.url.query}"
        asked = request.headers.get("if-none-match")

        def answer() -> tuple[int, bytes | None]:
            with res.db.reading() as s:
                # Read before making: an answer is at least as new as the generation it is kept at.
                gen = lineage_generation(s)
                if asked == f'"{gen}"':
                    return gen, None
                body = answers.get(key, gen)
                if body is None:
                    body = _encode(make(s))
                    answers.put(key, gen, body)
                return gen, body

        gen, body = await anyio.to_thread.run_sync(answer, limiter=making)
        headers = {"ETag": f'"{gen}"', "Cache-Control": "no-cache"}
        if body is None:
            return Response(status_code=304, headers=headers)
        return Response(content=body, media_type="application/json", headers=headers)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "store": res.store.url}

    @app.get("/artifacts/{ref}", response_class=JSONResponse)
    async def artifact(ref: str, request: Request) -> Response:
        """Full provenance of one file, by sha256 or a unique prefix (≥ 4 hex digits)."""
        return await kept(request, lambda s: lineage_record(res, ref, session=s))

    @app.get("/artifacts", response_class=JSONResponse)
    async def artifacts(request: Request,
                        model: str | None = Query(None, max_length=200, description="a model id"),
                        recipe: str | None = Query(None, max_length=200, description="a recipe name or digest"),
                        kind: str | None = Query(None, description=" | ".join(ARTIFACT_KINDS)),
                        limit: int = Query(50, ge=1, le=1000)) -> Response:
        if kind is not None and kind not in ARTIFACT_KINDS:
            raise BadInput(f"unknown kind {kind[:40]!r}: one of {', '.join(ARTIFACT_KINDS)}")

        def make(s: Any) -> dict[str, Any]:
            return {"artifacts": list_artifacts(s, kind, limit, model=model, recipe=recipe)}

        return await kept(request, make)

    @app.get("/sections/{sha}", response_class=JSONResponse)
    async def section(sha: str, request: Request, limit: int = Query(100, ge=1, le=1000)) -> Response:
        """The files that carry this section (a full sha256) byte for byte."""
        if not _FULL_SHA.match(sha):
            raise NotASha(f"{sha[:80]!r} is not a section sha256 (64 hex digits)")

        def make(s: Any) -> dict[str, Any]:
            out = section_carriers(s, sha, limit)
            if not out["files"]:
                raise UnknownArtifact(f"no recorded file carries a section with sha256 {sha}")
            return out

        return await kept(request, make)

    @app.get("/cards/{model}", response_class=JSONResponse)
    async def card(model: str, request: Request) -> Response:
        """The newest published card of a model: card.json as stored, and its CARD.md and chart."""
        from farm.model_ids import model_id

        mid = model_id(model[:200])

        def make(s: Any) -> dict[str, Any]:
            rec = latest_card(s, mid)
            if rec is None:
                raise UnknownArtifact(f"no published card for model {mid!r}: `farm card {mid}` publishes one")
            body = json.loads(res.store.open_verified_path(rec["sha256"]).read_text())
            d = rec["details"] or {}
            return {"model_id": mid, "card_sha256": rec["sha256"], "version": rec["version"],
                    "published_at": rec["created_at"], "markdown_sha256": d.get("markdown_sha256"),
                    "chart_sha256": d.get("chart_sha256"), "describes": d.get("describes", []), "card": body}

        return await kept(request, make)

    return app


def app_from_environment() -> FastAPI:
    """uvicorn's factory for a worker process of `farm api --workers N`: this farm's resources
    from the environment (FARM_*), as the parent process found them."""
    from farm.resources import get_resources

    return make_app(get_resources())


def serve(res: Resources, host: str, port: int, workers: int = 1) -> None:
    """One process, or `workers` processes on one socket (each with its own kept answers, each
    checked against the same lineage generation): a lookup is ~4 ms of Python, so one process
    serves ~250 a second whatever the cores."""
    import uvicorn

    # uvloop and httptools (C) rather than asyncio's loop and h11 (Python): per-request overhead.
    fast = {"loop": "uvloop", "http": "httptools", "log_level": "warning", "access_log": False}
    if workers > 1:
        uvicorn.run("farm.api:app_from_environment", factory=True, host=host, port=port, workers=workers, **fast)
        return
    uvicorn.run(make_app(res), host=host, port=port, **fast)
