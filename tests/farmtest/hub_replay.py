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
404 with `RepoNotFound` (the code huggingface_hub maps to RepositoryNotFoundError). Every request is logged with its status, so a test can say that no
weight was downloaded before a refusal.

Uploads (issue 20), as `huggingface_hub` 2.4's create_repo / create_commit call them over the LFS
protocol (HF_HUB_DISABLE_XET=1: the Xet path needs the hub's CAS servers, which cannot be replayed):
`POST /api/repos/create`, `POST /api/models/{repo}/preupload/{rev}` (a `.litertlm`, `.png` or any file over
10 MB goes by LFS, the rest as regular files; each answer carries the remote oid, so the client
skips an unchanged file), `POST /{repo}.git/info/lfs/objects/batch` and the `PUT` of each object
(its sha256 checked), and `POST /api/models/{repo}/commit/{rev}` (the NDJSON commit: header, files,
LFS files, deletions). A commit becomes the repository's new state (its tree lists each file with
its git blob id or LFS sha256) and is kept in `commits` with what it changed.
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
    commits: list[dict[str, Any]] = field(default_factory=list)  # uploads: {summary, added, deleted}
    lfs: set[str] = field(default_factory=set)  # paths stored by LFS

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
        self.objects: dict[str, bytes] = {}  # LFS objects received, by sha256
        self.validated: list[str] = []  # README.md texts whose metadata the client asked to validate
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:  # quiet: the test reads hub.requests
                pass

            def do_GET(self) -> None:
                hub._answer(self, body=True)

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_POST(self) -> None:
                hub._upload(self)

            def do_PUT(self) -> None:
                hub._upload(self)

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
            return self._error(h, 404, "RepoNotFound", "Repository not found")
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
            tree = [self._tree_entry(repo, s["rfilename"], s.get("size") or 0) for s in repo.answer["siblings"]]
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

    # --- uploads -------------------------------------------------------------------------------

    UPLOAD_ROUTES = (
        ("create", re.compile(r"/api/repos/create")),
        ("validate", re.compile(r"/api/validate-yaml")),
        ("preupload", re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/preupload/(?P<rev>[^/]+)")),
        ("commit", re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/commit/(?P<rev>[^/]+)")),
        ("batch", re.compile(r"/(?P<repo>[^/]+/[^/]+)\.git/info/lfs/objects/batch")),
        ("object", re.compile(r"/lfs-upload/(?P<oid>[0-9a-f]{64})")),
    )

    @staticmethod
    def _tree_entry(repo: "Repo", path: str, size: int) -> dict[str, Any]:
        data = repo.content(path)
        if data is None:  # a listed file the replay has no bytes for: an id from its name
            return {"type": "file", "path": path, "size": size, "oid": hashlib.sha1(path.encode()).hexdigest()}
        entry = {"type": "file", "path": path, "size": len(data), "oid": _git_blob(data)}
        if path in repo.lfs:
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    def _upload(self, h: BaseHTTPRequestHandler) -> None:
        path = unquote(urlsplit(h.path).path)
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        route, m = next(((name, m) for name, rx in self.UPLOAD_ROUTES if (m := rx.fullmatch(path))), (None, None))
        json_type = {"Content-Type": "application/json"}
        if m is None:
            return self._error(h, 404, "EntryNotFound", f"no route {h.command} {path}")
        if route != "object" and not h.headers.get("Authorization"):  # an LFS upload URL is pre-signed
            return self._error(h, 401, "Unauthorized", "Invalid credentials in Authorization header")
        if route == "create":
            req = json.loads(body)
            repo_id = f"{req.get('organization') or 'me'}/{req['name']}"
            if repo_id not in self.repos:
                self.repos[repo_id] = Repo({"id": repo_id, "sha": _commit_id(repo_id, 0), "gated": False,
                                            "private": bool(req.get("private")), "siblings": []})
            return self._send(h, 200, json.dumps({"url": f"{self.url}/{repo_id}"}).encode(), json_type, True)
        if route == "validate":  # the hub checks README.md's metadata before a commit that carries it
            errors = readme_metadata_errors(json.loads(body).get("content", ""))
            self.validated.append(json.loads(body).get("content", ""))
            return self._send(h, 400 if errors else 200, json.dumps(
                {"errors": [{"message": e} for e in errors], "warnings": []}).encode(), json_type, True)
        if route == "object":
            if hashlib.sha256(body).hexdigest() != m["oid"]:
                return self._error(h, 400, "BadRequest", "sha256 mismatch")
            self.objects[m["oid"]] = body
            return self._send(h, 200, b"", {}, True)
        repo = self.repos.get(m["repo"])
        if repo is None:
            return self._error(h, 404, "RepoNotFound", "Repository not found")
        if route == "preupload":
            files = []
            for f in json.loads(body)["files"]:
                lfs = f["path"].endswith((".litertlm", ".png")) or f["size"] > 10 * 2**20
                have = self._tree_entry(repo, f["path"], 0) if repo.content(f["path"]) is not None else None
                oid = (have.get("lfs") or {}).get("oid") if lfs and have else (have or {}).get("oid")
                files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                              "oid": oid})
            return self._send(h, 200, json.dumps({"files": files, "commitOid": repo.answer["sha"]}).encode(),
                              json_type, True)
        if route == "batch":
            objects = []
            for o in json.loads(body)["objects"]:
                entry = {"oid": o["oid"], "size": o["size"]}
                if o["oid"] not in self.objects:
                    entry["actions"] = {"upload": {"href": f"{self.url}/lfs-upload/{o['oid']}"}}
                objects.append(entry)
            return self._send(h, 200, json.dumps({"transfer": "basic", "objects": objects}).encode(),
                              {"Content-Type": "application/vnd.git-lfs+json"}, True)
        # commit: NDJSON lines
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        added, deleted, summary = [], [], ""
        for line in lines:
            v = line["value"]
            if line["key"] == "header":
                summary = v.get("summary", "")
            elif line["key"] == "file":
                import base64

                repo.files[v["path"]] = base64.b64decode(v["content"])
                repo.lfs.discard(v["path"])
                added.append(v["path"])
            elif line["key"] == "lfsFile":
                data = self.objects.get(v["oid"])
                if data is None:
                    return self._error(h, 400, "BadRequest", f"LFS object {v['oid']} was never uploaded")
                repo.files[v["path"]] = data
                repo.lfs.add(v["path"])
                added.append(v["path"])
            elif line["key"] == "deletedFile":
                repo.files.pop(v["path"], None)
                repo.lfs.discard(v["path"])
                deleted.append(v["path"])
        repo.commits.append({"summary": summary, "added": added, "deleted": deleted})
        repo.answer["sha"] = _commit_id(m["repo"], len(repo.commits))
        repo.answer["siblings"] = [{"rfilename": p, "size": len(d)} for p, d in sorted(repo.files.items())]
        return self._send(h, 200, json.dumps({"commitUrl": f"{self.url}/{m['repo']}/commit/{repo.answer['sha']}",
                                              "commitOid": repo.answer["sha"]}).encode(), json_type, True)


def readme_metadata_errors(text: str) -> list[str]:
    """What the hub's metadata validation refuses, as far as the replay knows it: front matter that
    is not a YAML mapping, and the model-card fields of the wrong type (a README without front
    matter is only a warning there: no error here)."""
    import yaml

    if not text.startswith("---\n") or "\n---\n" not in text[3:]:
        return []
    try:
        meta = yaml.safe_load(text[4:].split("\n---\n", 1)[0])
    except yaml.YAMLError as exc:
        return [f"YAML: {exc}"]
    if not isinstance(meta, dict):
        return ["the metadata is not a mapping"]
    errors = [f'"{k}" must be a string' for k in ("license", "pipeline_tag", "library_name", "license_name")
              if k in meta and not isinstance(meta[k], str)]
    if "tags" in meta and not (isinstance(meta["tags"], list) and all(isinstance(t, str) for t in meta["tags"])):
        errors.append('"tags" must be a list of strings')
    if meta.get("license") == "other" and not meta.get("license_name"):
        errors.append('"license_name" is required when "license" is "other"')
    return errors


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _commit_id(repo_id: str, n: int) -> str:
    return hashlib.sha1(f"{repo_id}@{n}".encode()).hexdigest()
