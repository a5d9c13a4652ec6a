"""A Hugging Face hub on 127.0.0.1 for the tests: the real `huggingface_hub` client (the toolchain's
`hub_info` and `fetch_hf`, pointed at it by HF_ENDPOINT) talks to it over HTTP exactly as it talks to
huggingface.co, which is not reachable here.

It replays, per repository, a model_info answer (tests/data/hub/*-model-info.json: id, sha, gated,
siblings; crafted in the hub's shape, since no real answer could be recorded offline) and serves the
files of a folder on disk as that repository's files at that commit. What the hub does that the
farm relies on is what it does here: `GET /api/models/{repo}[/revision/{rev}]` answers the metadata,
`GET /api/models/{repo}/tree/{rev}` lists the files (what
`snapshot_download` reads), `HEAD`/`GET /{repo}/resolve/{rev}/{file}` answers a file with its commit, ETag and size, a gated
repository answers 401 with `X-Error-Code: GatedRepo` to a request without a token, an unknown one
404 with `RepositoryNotFound`. Every request is logged with its status, so a test can say that no
weight was downloaded before a refusal.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    answer: dict[str, Any]  # the model_info answer (id, sha, gated, private, siblings)
    folder: Path | None = None  # the files served as the repository's, at answer["sha"]
    files: dict[str, bytes] = field(default_factory=dict)  # or given inline (config.json)
    listing_down: bool = False  # the file listing answers 503 (the hub's API half up)

    def content(self, name: str) -> bytes | None:
        if name in self.files:
            return self.files[name]
        if self.folder is not None and (self.folder / name).is_file():
            return (self.folder / name).read_bytes()
        return None

    @classmethod
    def from_folder(cls, repo_id: str, folder: Path, sha: str = "0" * 39 + "1", gated: bool | str = False) -> "Repo":
        siblings = [{"rfilename": p.relative_to(folder).as_posix(), "size": p.stat().st_size}
                    for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".")]
        return cls({"id": repo_id, "sha": sha, "gated": gated, "private": False, "siblings": siblings}, folder)


class HubReplay:
    def __init__(self, repos: dict[str, Repo]):
        self.repos = repos
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status) in arrival order
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:  # quiet: the test reads hub.requests
                pass

            def do_GET(self) -> None:
                hub._answer(self, body=True)

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "HubReplay":
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def downloads(self) -> list[str]:
        """The files whose bytes were sent (a GET on resolve answered 200)."""
        return [path.split("/resolve/", 1)[1].split("/", 1)[1] for method, path, status in self.requests
                if method == "GET" and "/resolve/" in path and status == 200]

    # route name, path pattern; every route names a repository, and all but model_info are gated
    ROUTES = (
        ("info", re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?")),
        ("tree", re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)")),
        ("file", re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)")),
    )

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        route, m = next(((name, m) for name, rx in self.ROUTES if (m := rx.fullmatch(path))), (None, None))
        if m is None:
            return self._error(h, 404, "EntryNotFound", f"no route {path}")
        repo = self.repos.get(m["repo"])
        if repo is None:
            return self._error(h, 404, "RepositoryNotFound", "Repository not found")
        json_type = {"Content-Type": "application/json"}
        if route == "info":
            if m["rev"] not in (None, "main", repo.answer["sha"]):
                return self._error(h, 404, "RevisionNotFound", "Invalid rev id")
            answer = {k: v for k, v in repo.answer.items() if not k.startswith("_")}  # "_recorded": provenance
            return self._send(h, 200, json.dumps(answer).encode(), json_type, body)
        if repo.answer.get("gated") and not h.headers.get("Authorization"):
            return self._error(h, 401, "GatedRepo", f"Access to model {m['repo']} is restricted.")
        if route == "tree":  # list_repo_tree (what snapshot_download lists the files with), one page
            if repo.listing_down:
                return self._error(h, 503, "ServiceUnavailable", "the listing is down")
            tree = [{"type": "file", "path": s["rfilename"], "size": s.get("size") or 0,
                     "oid": hashlib.sha1(s["rfilename"].encode()).hexdigest()} for s in repo.answer["siblings"]]
            return self._send(h, 200, json.dumps(tree).encode(), json_type, body)
        data = repo.content(m["file"])
        if data is None:
            return self._error(h, 404, "EntryNotFound", "Entry not found")
        headers = {"X-Repo-Commit": repo.answer["sha"], "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                   "Content-Type": "application/octet-stream"}
        return self._send(h, 200, data, headers, body)

    def _send(self, h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        self.requests.append((h.command, unquote(urlsplit(h.path).path), status))
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        data = json.dumps({"error": message}).encode()
        self._send(h, status, data, {"X-Error-Code": code, "X-Error-Message": message,
                                     "Content-Type": "application/json"}, h.command != "HEAD")
