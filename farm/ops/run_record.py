"""A finished flow run put on record through Prefect's REST API, without Prefect's client.

For a build whose every result was already recorded (farm/recorded.py) nothing runs, but the UI
should still list the build with its summary, as it lists every other. Importing prefect and running
an empty flow cost ~2 s of such a build's ~2.8 s; three POSTs to the API cost milliseconds. The
routes and bodies are Prefect 3's (prefect/server/api: flows, flow_runs, artifacts): `POST /flows/`
answers the flow of that name (made on first use), `POST /flow_runs/` takes the run's state
(`StateCreate`), `POST /artifacts/` a markdown artifact tied to the run."""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any, Mapping


class RunNotRecorded(Exception):
    """The API did not take the run (unreachable, refused): the caller runs the flow instead."""


def record_finished_run(api_url: str, environ: Mapping[str, str], flow: str, parameters: dict[str, Any],
                        message: str, tags: list[str], artifact: dict[str, Any] | None = None,
                        timeout: float = 10.0) -> str:
    """Create a flow run of `flow` already Completed (state name "Cached": what ran was lineage's
    reads), with `parameters`, `tags` and its markdown `artifact` ({key, markdown, description});
    the run's id."""
    post = _poster(api_url.rstrip("/"), environ, timeout)
    flow_id = post("/flows/", {"name": flow})["id"]
    run = post("/flow_runs/", {"flow_id": flow_id, "parameters": parameters, "tags": tags,
                               "state": {"type": "COMPLETED", "name": "Cached", "message": message}})
    if artifact is not None:
        post("/artifacts/", {"key": artifact["key"], "type": "markdown", "data": artifact["markdown"],
                             "description": artifact.get("description"), "flow_run_id": run["id"]})
    return run["id"]


def _poster(base: str, environ: Mapping[str, str], timeout: float):
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    # The two ways Prefect's own client authenticates (Prefect Cloud's key, a server's basic auth).
    if environ.get("PREFECT_API_KEY"):
        headers["Authorization"] = f"Bearer {environ['PREFECT_API_KEY']}"
    elif environ.get("PREFECT_API_AUTH_STRING"):
        headers["Authorization"] = "Basic " + base64.b64encode(environ["PREFECT_API_AUTH_STRING"].encode()).decode()

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            raise RunNotRecorded(f"POST {path}: {exc}") from exc

    return post
