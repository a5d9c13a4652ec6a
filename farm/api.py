"""Lineage over HTTP: a read-only FastAPI service (`farm api`). The same answers as the CLI's
`--json`, from the same named queries (farm/lineage/queries.py); no route writes.

    GET /artifacts/{sha256-or-prefix}   the record `farm lineage --json` prints
    GET /artifacts?model=&recipe=&kind=&limit=   newest first
    GET /sections/{sha256}              the files carrying that section byte for byte
    GET /cards/{model}                  the model's newest published card (card.json) and its files
    GET /health

Errors are JSON `{"error", "detail"}`: 400 a malformed sha256 or too-short prefix (or a bad query
value), 404 unknown, 409 an ambiguous prefix (with `candidates`), 503 the lineage DB unreachable.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from farm.errors import AmbiguousPrefix, BadInput, NotASha, StoreError, UnknownArtifact
from farm.lineage.db import LineageUnavailable
from farm.resources import Resources

_FULL_SHA = re.compile(r"^[0-9a-f]{64}$")


def _json(body: dict[str, Any]) -> Response:
    """A record that is JSON already (the queries return plain dicts), serialized once: FastAPI's
    own path validates a returned dict against the annotation and walks it with jsonable_encoder,
    which cost a lineage record (gate metrics, evidence, sections) several ms a lookup."""
    return Response(content=json.dumps(body, separators=(",", ":")), media_type="application/json")


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
    from farm.lineage.queries import (
        ARTIFACT_KINDS,
        latest_card,
        list_artifacts,
        section_carriers,
    )
    from farm.lineage.report import lineage_record

    app = FastAPI(title="litertlm-farm lineage", version=__version__,
                  description="Read-only lineage of every file the farm built: by sha256 or prefix, by "
                              "section, by model, and each model's published card.")

    # Starlette picks a handler by walking the exception's MRO: the BadInput subclasses keep their own status.
    for exc_type, status, kind in ((NotASha, 400, "bad_sha256"), (UnknownArtifact, 404, "not_found"),
                                   (AmbiguousPrefix, 409, "ambiguous_prefix"), (BadInput, 400, "bad_request"),
                                   (LineageUnavailable, 503, "lineage_unavailable"),
                                   (StoreError, 503, "store_unavailable")):
        app.add_exception_handler(exc_type, _handler(status, kind))

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "store": res.store.url}

    @app.get("/artifacts/{ref}", response_class=JSONResponse)
    def artifact(ref: str) -> Response:
        """Full provenance of one file, by sha256 or a unique prefix (≥ 4 hex digits)."""
        return _json(lineage_record(res, ref))

    @app.get("/artifacts")
    def artifacts(model: str | None = Query(None, max_length=200, description="a model id"),
                  recipe: str | None = Query(None, max_length=200, description="a recipe name or digest"),
                  kind: str | None = Query(None, description=" | ".join(ARTIFACT_KINDS)),
                  limit: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
        if kind is not None and kind not in ARTIFACT_KINDS:
            raise BadInput(f"unknown kind {kind[:40]!r}: one of {', '.join(ARTIFACT_KINDS)}")
        with res.db.session() as s:
            return {"artifacts": list_artifacts(s, kind, limit, model=model, recipe=recipe)}

    @app.get("/sections/{sha}")
    def section(sha: str, limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
        """The files that carry this section (a full sha256) byte for byte."""
        if not _FULL_SHA.match(sha):
            raise NotASha(f"{sha[:80]!r} is not a section sha256 (64 hex digits)")
        with res.db.session() as s:
            out = section_carriers(s, sha, limit)
        if not out["files"]:
            raise UnknownArtifact(f"no recorded file carries a section with sha256 {sha}")
        return out

    @app.get("/cards/{model}")
    def card(model: str) -> dict[str, Any]:
        """The newest published card of a model: card.json as stored, and its CARD.md and chart."""
        from farm.config import model_id

        mid = model_id(model[:200])
        with res.db.session() as s:
            rec = latest_card(s, mid)
        if rec is None:
            raise UnknownArtifact(f"no published card for model {mid!r}: `farm card {mid}` publishes one")
        body = json.loads(res.store.open_verified_path(rec["sha256"]).read_text())
        d = rec["details"] or {}
        return {"model_id": mid, "card_sha256": rec["sha256"], "version": rec["version"],
                "published_at": rec["created_at"], "markdown_sha256": d.get("markdown_sha256"),
                "chart_sha256": d.get("chart_sha256"), "describes": d.get("describes", []), "card": body}

    return app


def serve(res: Resources, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(make_app(res), host=host, port=port, log_level="warning", access_log=False)
