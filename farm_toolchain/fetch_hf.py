"""`fetch_hf`: download (or find in the cache) a Hugging Face model snapshot.

Request: {"repo_id": "org/name", "revision": "main" | tag | commit sha (default "main"),
          "cache_dir": str (default: the huggingface_hub cache)}
Result:  {"model_dir": the snapshot folder, "revision": the resolved commit sha (its folder name)}

Only what the export needs is fetched: *.json, *.safetensors, *.jinja, *.txt, tokenizer*.
When the hub cannot be reached, a complete snapshot already in cache_dir for that revision is
returned (huggingface_hub's own fallback); otherwise the request fails as bad input saying so.
Timeouts default to 10 s (HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT override them).
"""

from __future__ import annotations

import importlib
import re
import tempfile
from pathlib import Path
from typing import Any

from farm_toolchain import protocol
from farm_toolchain.commands import COMMANDS
from farm_toolchain.protocol import BadInput

ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "tokenizer*"]
_SHA = re.compile(r"[0-9a-f]{40}")
_UNREACHABLE = (
    "the Hugging Face hub is unreachable ({why}) and {repo}@{rev} is not in cache_dir {cache}: "
    "use a `local` source or pre-populate the cache"
)


def _connection_error(exc: BaseException) -> BaseException | None:
    """The connection-level cause of exc, if any (walks __cause__/__context__)."""
    transport: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
    # huggingface_hub 2.x talks through httpx2 (1.x through httpx); take whichever is installed.
    for name in ("httpx2", "httpx"):
        try:
            transport += (importlib.import_module(name).TransportError,)
        except (ImportError, AttributeError):
            pass
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, transport):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


# The caller's own environment decides how the hub is reached (HF_ENDPOINT, HF_TOKEN, offline).
@COMMANDS.register("fetch_hf")
def handle(request: dict[str, Any]) -> dict[str, Any]:
    repo_id = request.get("repo_id")
    if not isinstance(repo_id, str) or not repo_id.strip():
        raise BadInput("repo_id is required: a Hugging Face model id such as 'org/name'")
    revision = request.get("revision") or "main"
    if not isinstance(revision, str):
        raise BadInput(f"revision must be a branch, tag or commit sha string, got {revision!r}")
    cache_dir = request.get("cache_dir")
    if cache_dir is not None and not isinstance(cache_dir, str):
        raise BadInput(f"cache_dir must be a folder path, got {cache_dir!r}")
    from huggingface_hub import errors as hf_errors
    from huggingface_hub import snapshot_download

    cache_label = cache_dir or "(default huggingface_hub cache)"
    protocol.progress(f"fetching {repo_id}@{revision} into {cache_label}")
    try:
        model_dir = snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=cache_dir,
            allow_patterns=ALLOW_PATTERNS,
        )
    except hf_errors.HFValidationError as exc:
        raise BadInput(f"invalid repo_id or revision {repo_id!r}@{revision!r}: {str(exc).splitlines()[0]}") from exc
    except hf_errors.GatedRepoError as exc:
        raise BadInput(f"{repo_id} is gated: accept its terms on the hub and set HF_TOKEN") from exc
    except hf_errors.RepositoryNotFoundError as exc:
        raise BadInput(f"{repo_id} was not found on the hub (or is private: set HF_TOKEN)") from exc
    except hf_errors.RevisionNotFoundError as exc:
        raise BadInput(f"revision {revision!r} does not exist in {repo_id}") from exc
    except Exception as exc:  # noqa: BLE001 - sorted below
        conn = _connection_error(exc)
        offline = isinstance(exc, hf_errors.LocalEntryNotFoundError) or conn is not None
        if not offline:
            raise
        why = type(conn).__name__ if conn is not None else "offline or incomplete cache"
        raise BadInput(_UNREACHABLE.format(why=why, repo=repo_id, rev=revision, cache=cache_label)) from exc

    path = Path(model_dir)
    resolved = path.name
    if not _SHA.fullmatch(resolved):
        raise RuntimeError(f"snapshot folder {path} is not named by a commit sha")
    if not (path / "config.json").is_file():
        raise BadInput(f"{repo_id}@{resolved} has no config.json: it is not a transformers model repo")
    protocol.progress(f"{repo_id}@{revision} is commit {resolved}")
    return {"model_dir": str(path), "revision": resolved}


@COMMANDS.register("hub_info")
def hub_facts(request: dict[str, Any]) -> dict[str, Any]:
    """`hub_info`: what the hub says about a repository before any weight is downloaded, for the
    farm's refusals (farm/refusals.py): model_info (gated, private, every file with its size) and
    config.json. Request as fetch_hf's. Result: {"answer": {"id", "sha", "gated", "private",
    "siblings": [{"rfilename", "size"}]}, "config": {...}} or {"offline": reason} when the hub
    cannot be reached (the folder's own checks then run on a cached snapshot)."""
    repo_id = request.get("repo_id")
    if not isinstance(repo_id, str) or not repo_id.strip():
        raise BadInput("repo_id is required: a Hugging Face model id such as 'org/name'")
    revision = request.get("revision") or "main"
    import json

    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub import errors as hf_errors

    try:
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
        answer = {"id": info.id, "sha": info.sha, "gated": info.gated or False, "private": bool(info.private),
                  "siblings": [{"rfilename": s.rfilename, "size": s.size} for s in info.siblings or []]}
        config: dict[str, Any] = {}
        if any(s["rfilename"] == "config.json" for s in answer["siblings"]):
            # Into a throwaway cache, not cache_dir: a snapshot folder holding config.json alone is
            # what snapshot_download returns as the whole snapshot when its file listing then fails
            # (it cannot tell a partial folder without a cached listing). Found by the hub replay
            # test: a refused listing gave a "snapshot" of config.json and no weights.
            with tempfile.TemporaryDirectory(prefix="farm-hub-info-") as meta:
                try:
                    path = hf_hub_download(repo_id, "config.json", revision=info.sha, cache_dir=meta)
                    config = json.loads(Path(path).read_text(encoding="utf-8"))
                except hf_errors.GatedRepoError:
                    pass  # the answer (gated, siblings) stands; config.json is behind the gate
        return {"answer": answer, "config": config}
    except hf_errors.GatedRepoError:
        # The hub refused even the metadata without a token.
        return {"answer": {"id": repo_id, "sha": revision, "gated": "manual", "private": False, "siblings": []},
                "config": {}}
    except hf_errors.RepositoryNotFoundError as exc:
        raise BadInput(f"{repo_id} was not found on the hub (or is private: set HF_TOKEN)") from exc
    except Exception as exc:  # noqa: BLE001 - offline is an answer, anything else is not
        conn = _connection_error(exc)
        if conn is None and not isinstance(exc, hf_errors.LocalEntryNotFoundError):
            raise
        return {"offline": type(conn).__name__ if conn is not None else "offline"}
