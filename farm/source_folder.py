"""An HF-format source folder, as the farm judges and records it: the checks before any work
(`validate_folder`: the refusals, a tokenizer, an end-of-sequence id), its identity (`hash_folder`),
the source's own end-of-sequence ids (`generation_settings`), and the recorded folder rebuilt from
the store for a gate's reference (`materialize_source`, each file checked against lineage).

Used by the source stage, the CLI's checks before a build, and the gate suite; it runs no stage."""

from __future__ import annotations


import json
import os
from pathlib import Path

from farm.errors import BadInput
from farm.families import check_architecture, get_family
from farm.resources import Resources
from farm.store import hash_file


def hash_folder(folder: Path) -> list[dict]:
    files = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_dir() or any(part.startswith(".") for part in Path(rel).parts):
            continue
        sha, size = hash_file(p)  # the store's streamed hasher: one way to hash a file
        files.append({"path": rel, "sha256": sha, "size": size})
    return files



def validate_folder(folder: Path, family_name: str, memory=None) -> None:
    """Everything the folder must be before any work: the refusals (farm/refusals/: remote code,
    pre-quantized or missing weights, an architecture no family covers, too large for this
    machine by the export's predicted peak, `memory`: recorded_peak's answer), then the family's own checks."""
    from farm.families import family_architectures
    from farm.refusals import check_source, folder_facts

    family = get_family(family_name)
    if not folder.is_dir():
        raise BadInput(f"source folder {str(folder)!r} does not exist: fix source.path in the config")
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise BadInput(f"source folder {str(folder)!r} has no config.json: is it an HF model folder?")
    check_source(folder_facts(folder, family_architectures(), _json_object(cfg_file), memory))
    if not (folder / "tokenizer.json").is_file():
        raise BadInput(
            f"source folder {str(folder)!r} has no tokenizer.json: the bundle must carry the "
            "repository's own tokenizer.json; add it to the folder"
        )
    architectures = _json_object(cfg_file).get("architectures")
    check_architecture(family, architectures, str(cfg_file))
    tok = _json_object(folder / "tokenizer.json")
    if not isinstance(tok.get("model"), dict):
        raise BadInput(f"{folder / 'tokenizer.json'} has no 'model': it is not a tokenizers file")
    generation_settings(folder)  # a reference needs its end-of-sequence ids



def _json_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text: is it the right file?") from None
    except ValueError as exc:
        raise BadInput(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path} must be a JSON object, not a {type(data).__name__}")
    return data



def _ids(value) -> list[int]:
    items = value if isinstance(value, list) else [value]
    return [int(v) for v in items if isinstance(v, int) and not isinstance(v, bool) and v >= 0]



def generation_settings(folder: Path) -> dict:
    """The source's own end-of-sequence ids: generation_config.json's eos_token_id (what transformers'
    generate stops at), else config.json's, else the tokenizer config's eos_token looked up among
    tokenizer.json's added tokens. {"eos_token_ids": [...], "from": file}. The PyTorch reference of
    every gate stops by these; a source that has none is bad input (a reference with no end would run
    every reply to the cap)."""
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            ids = _ids(_json_object(path).get("eos_token_id"))
            if ids:
                return {"eos_token_ids": sorted(set(ids)), "from": name}
    tok_cfg = folder / "tokenizer_config.json"
    eos = _json_object(tok_cfg).get("eos_token") if tok_cfg.is_file() else None
    if isinstance(eos, dict):
        eos = eos.get("content")
    if isinstance(eos, str):
        added = _json_object(folder / "tokenizer.json").get("added_tokens") or []
        ids = [a["id"] for a in added if isinstance(a, dict) and a.get("content") == eos and isinstance(a.get("id"), int)]
        if ids:
            return {"eos_token_ids": ids, "from": "tokenizer_config.json"}
    raise BadInput(
        f"source folder {str(folder)!r} declares no end-of-sequence token (eos_token_id in "
        "generation_config.json or config.json, or eos_token in tokenizer_config.json): add it"
    )



class SourceFileChanged(BadInput):
    """A recorded source file is neither in the store nor unchanged on disk."""



def materialize_source(res: Resources, source: dict, dest: Path) -> Path:
    """The recorded source folder under `dest`, rebuilt from the store: every file a link to (local
    store) or a verified copy of (S3) its object, checked against the sha256 lineage recorded. A file
    the store lacks (a source recorded before sources were stored) is taken from the recorded folder
    only if it still hashes to the recorded sha256 (and is then stored); otherwise this refuses,
    naming the file: a reference that is not the recorded one must not be measured against."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in source["files"]:
        target = dest / f["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        if res.store.verify(f["sha256"]) != "ok":
            on_disk = Path(source["path"] or "") / f["path"]
            actual = hash_file(on_disk)[0] if source["path"] and on_disk.is_file() else None
            if actual != f["sha256"]:
                where = (f"the recorded folder's copy {on_disk} hashes to {actual[:16]}…" if actual
                         else f"the recorded folder {source['path']} has no such file")
                raise SourceFileChanged(
                    f"source file {f['path']!r} of source {source['id'][:16]} (sha256 {f['sha256'][:16]}…) is not in "
                    f"the store (or does not verify there) and {where}: restore the file, or build the config "
                    "again to record a new source"
                )
            res.store.put_file(on_disk)
        obj = res.store.open_verified_path(f["sha256"])
        os.symlink(obj, target)
    return dest
