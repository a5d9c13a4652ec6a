"""Resolve a config's source to an HF-format folder on disk, store every file of it, and record its
identity.

Identity is content: the sha256 of every file (plus repo id and resolved revision for hub sources),
so the same weights reached two ways are one source, and a changed file is a new source. Every file
(weights, config, tokenizer, template) goes into the content-addressed store as it is recorded, so
the PyTorch reference a gate measures against is the recorded one: `materialize_source` rebuilds the
folder from the store, each file's sha256 checked against lineage, on any worker with the store and
the lineage DB — the original folder may be gone or edited."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from farm.config import BuildConfig, GeneratedSource, GgufSource, HubSource, LocalSource, digest
from farm.errors import BadInput
from farm.families import check_architecture, get_family
from farm.leftovers import owner_tag
from farm.lineage.record import record_artifact, record_source
from farm.resources import Resources
from farm.store import hash_file
from farm.stages.common import ArtifactRef, Progress, artifact_ref, stderr_progress

COMPLETE_MARKER = ".farm-complete"


class SourceResult(BaseModel):
    name: str = "source"
    status: Literal["ran", "cached"]
    seconds: float
    source_id: str
    model_dir: str
    family: str
    tokenizer: ArtifactRef


def _materialize_generated(res: Resources, spec: GeneratedSource, progress: Progress) -> tuple[Path, bool]:
    """Generated models are deterministic per (spec, toolchain), so they are cached under FARM_CACHE."""
    key = digest({"generated": spec.model_dump(), "toolchain": res.toolchain_id})
    final = res.settings.cache / "sources" / "generated" / key[:16]
    if (final / COMPLETE_MARKER).exists():
        return final, False
    tmp = final.with_name(final.name + f".tmp-{owner_tag()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        res.toolchain.call(
            "make_model",
            {
                "family": spec.family,
                "config": spec.config,
                "seed": spec.seed,
                "tokenizer": spec.tokenizer,
                "output_dir": str(tmp),
            },
            progress=progress,
        )
        (tmp / COMPLETE_MARKER).write_text(key + "\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final, True


def _materialize_gguf(res: Resources, spec: GgufSource, progress: Progress) -> tuple[Path, bool, dict]:
    """Dequantize once per (GGUF location, toolchain) into FARM_CACHE; identity is the GGUF's sha256."""
    where = {"gguf_path": str(spec.path)} if spec.path else {"package_file": {"package": spec.package, "file": spec.file}}
    key = digest({"gguf": where, "toolchain": res.toolchain_id})
    final = res.settings.cache / "sources" / "gguf" / key[:16]
    marker = final / COMPLETE_MARKER
    if marker.exists():
        return final, False, json.loads(marker.read_text())
    tmp = final.with_name(final.name + f".tmp-{owner_tag()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        # A package that ships its GGUF in chunks joins them once, under FARM_CACHE (not in the key:
        # the joined file's sha256 is recorded and checked against the package's own).
        out = res.toolchain.call("import_gguf", {**where, "output_dir": str(tmp),
                                                 "assemble_dir": str(res.settings.cache / "sources" / "gguf-assembled")},
                                 progress=progress)
        info = {k: out.get(k) for k in ("gguf_sha256", "gguf_size", "package", "tokenizer_pre", "patches", "gguf_path")}
        (tmp / COMPLETE_MARKER).write_text(json.dumps(info))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final, True, info


def _materialize_hub(res: Resources, spec: HubSource, progress: Progress) -> tuple[Path, str]:
    # The refusals on what the hub says, before a weight is downloaded (a gated repository, remote
    # code, pre-quantized or missing weights, no family, too large); offline, the folder's own
    # checks run on the cached snapshot instead.
    from farm.families import family_architectures
    from farm.refusals import check_source, hub_facts

    info = res.toolchain.call("hub_info", {"repo_id": spec.repo_id, "revision": spec.revision,
                                           "cache_dir": str(res.settings.cache / "hf")}, progress=progress)
    if "answer" in info:
        check_source(hub_facts(info["answer"], info["config"], family_architectures(), recorded_peak(res)))
    out = res.toolchain.call(
        "fetch_hf",
        {"repo_id": spec.repo_id, "revision": spec.revision, "cache_dir": str(res.settings.cache / "hf")},
        progress=progress,
    )
    return Path(out["model_dir"]), out["revision"]


def hash_folder(folder: Path) -> list[dict]:
    files = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_dir() or any(part.startswith(".") for part in Path(rel).parts):
            continue
        sha, size = hash_file(p)  # the store's streamed hasher: one way to hash a file
        files.append({"path": rel, "sha256": sha, "size": size})
    return files


def validate_folder(folder: Path, family_name: str, peak: tuple[float, str] | None = None) -> None:
    """Everything the folder must be before any work: the refusals (farm/refusals.py: remote code,
    pre-quantized or missing weights, an architecture no family covers, too large for this
    machine by the export's recorded peak per parameter), then the family's own checks."""
    from farm.families import family_architectures
    from farm.refusals import check_source, folder_facts

    family = get_family(family_name)
    if not folder.is_dir():
        raise BadInput(f"source folder {str(folder)!r} does not exist: fix source.path in the config")
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise BadInput(f"source folder {str(folder)!r} has no config.json: is it an HF model folder?")
    check_source(folder_facts(folder, family_architectures(), _json_object(cfg_file), peak))
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


def resolve_source(res: Resources, cfg: BuildConfig, progress: Progress = stderr_progress) -> SourceResult:
    started = time.monotonic()
    spec = cfg.source
    get_family(cfg.family)
    ran = False
    repo_id = revision = None
    if isinstance(spec, LocalSource):
        folder = spec.path
    elif isinstance(spec, HubSource):
        folder, revision = _materialize_hub(res, spec, progress)
        repo_id = spec.repo_id
    elif isinstance(spec, GgufSource):
        folder, ran, info = _materialize_gguf(res, spec, progress)
        pkg = info.get("package") or {}
        # The GGUF file is the real source: its sha256 is the revision, its package the repo.
        repo_id = f"pypi:{pkg['distribution']}=={pkg['version']}" if pkg else str(spec.path)
        revision = f"gguf-sha256:{info['gguf_sha256']}"
    else:
        folder, ran = _materialize_generated(res, spec, progress)
    validate_folder(folder, cfg.family, recorded_peak(res))

    files = hash_folder(folder)
    tok = next(f for f in files if f["path"] == "tokenizer.json")
    source_id = digest({"kind": spec.kind, "repo_id": repo_id, "revision": revision, "files": files})
    generation = generation_settings(folder)

    # Every file into the store (the gates' reference is rebuilt from it); an object already there is
    # not copied again (a 540 MB weights file would be, on every build).
    for f in files:
        if res.store.verify(f["sha256"]) != "ok":
            res.store.put_file(folder / f["path"])  # replaces an object that does not verify
    # The tokenizer is also an artifact of its own: lineage names it by sha256 and later gates
    # compare the bundle's tokenizer section with exactly these bytes.
    ref = res.store.put_file(folder / "tokenizer.json")
    with res.db.session() as s:
        record_source(
            s,
            id=source_id,
            kind=spec.kind,
            name=cfg.name,
            family=cfg.family,
            repo_id=repo_id,
            revision=revision,
            path=str(folder),
            spec=spec.model_dump(mode="json"),
            files=files,
            tokenizer_sha256=tok["sha256"],
            generation=generation,
        )
        record_artifact(
            s, sha256=ref.sha256, kind="tokenizer", size=ref.size, uri=ref.uri, source_id=source_id
        )
    return SourceResult(
        status="ran" if ran else "cached",
        seconds=round(time.monotonic() - started, 3),
        source_id=source_id,
        model_dir=str(folder),
        family=cfg.family,
        tokenizer=artifact_ref(res, ref.sha256),
    )


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


def recorded_peak(res: Resources) -> tuple[float, str] | None:
    from farm.lineage.queries import export_peak_per_param

    with res.db.session() as s:
        return export_peak_per_param(s)
