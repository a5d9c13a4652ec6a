"""Resolve a config's source to an HF-format folder on disk and record its identity.

Identity is content: the sha256 of every file (plus repo id and resolved revision for hub sources),
so the same weights reached two ways are one source, and a changed file is a new source."""

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
    tmp = final.with_name(final.name + f".tmp-{os.getpid()}")
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
    tmp = final.with_name(final.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        out = res.toolchain.call("import_gguf", {**where, "output_dir": str(tmp)}, progress=progress)
        info = {k: out.get(k) for k in ("gguf_sha256", "gguf_size", "package", "tokenizer_pre", "patches", "gguf_path")}
        (tmp / COMPLETE_MARKER).write_text(json.dumps(info))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final, True, info


def _materialize_hub(res: Resources, spec: HubSource, progress: Progress) -> tuple[Path, str]:
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


def validate_folder(folder: Path, family_name: str) -> None:
    family = get_family(family_name)
    if not folder.is_dir():
        raise BadInput(f"source folder {str(folder)!r} does not exist: fix source.path in the config")
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise BadInput(f"source folder {str(folder)!r} has no config.json: is it an HF model folder?")
    if not (folder / "tokenizer.json").is_file():
        raise BadInput(
            f"source folder {str(folder)!r} has no tokenizer.json: the bundle must carry the "
            "repository's own tokenizer.json; add it to the folder"
        )
    try:
        architectures = json.loads(cfg_file.read_text()).get("architectures")
    except ValueError as exc:
        raise BadInput(f"{cfg_file} is not valid JSON: {exc}") from exc
    check_architecture(family, architectures, str(cfg_file))


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
    validate_folder(folder, cfg.family)

    files = hash_folder(folder)
    tok = next(f for f in files if f["path"] == "tokenizer.json")
    source_id = digest({"kind": spec.kind, "repo_id": repo_id, "revision": revision, "files": files})

    # The tokenizer is stored as an artifact of its own: lineage names it by sha256 and later gates
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
