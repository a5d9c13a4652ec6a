"""Resolve a config's source to an HF-format folder on disk, store every file of it, and record its
identity.

Identity is content: the sha256 of every file (plus repo id and resolved revision for hub sources),
so the same weights reached two ways are one source, and a changed file is a new source. Every file
(weights, config, tokenizer, template) goes into the content-addressed store as it is recorded, so
the PyTorch reference a gate measures against is the recorded one: `farm/source_folder.py` rebuilds the
folder from the store, each file's sha256 checked against lineage, on any worker with the store and
the lineage DB — the original folder may be gone or edited."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from farm.config import BuildConfig, GeneratedSource, GgufSource, HubSource, LocalSource
from farm.digest import digest
from farm.families import get_family
from farm.leftovers import owner_tag
from farm.lineage.record import record_stored, record_source
from farm.resources import Resources
from farm.export_settings import export_config
from farm.refusals import recorded_peak
from farm.source_folder import generation_settings, hash_folder, validate_folder
from farm.progress import Progress, stderr_progress
from farm.stages.common import ArtifactRef, artifact_ref, require_work

COMPLETE_MARKER = ".farm-complete"


class SourceResult(BaseModel):
    name: str = "source"
    status: Literal["ran", "cached"]
    seconds: float
    source_id: str
    model_dir: str
    family: str
    tokenizer: ArtifactRef


def _from_store(res: Resources, found: dict | None, final: Path, marker: str, progress: Progress) -> bool:
    """Rebuild a source another host recorded into `final` from the store (each file a copy verified
    while it streams: the S3 object cache may be evicted), so no host makes or downloads a source
    twice. False where none is recorded or a file is not in the store."""
    if found is None or any(res.store.verify(f["sha256"]) != "ok" for f in found["files"]):
        return False
    require_work("rebuilding the source from the store")
    tmp = final.with_name(final.name + f".tmp-{owner_tag()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for f in found["files"]:
            (tmp / f["path"]).parent.mkdir(parents=True, exist_ok=True)
            res.store.get_to_path(f["sha256"], tmp / f["path"])
        (tmp / COMPLETE_MARKER).write_text(marker)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"source {found['id'][:12]} rebuilt from the store ({len(found['files'])} files, recorded on host "
             f"{found.get('host') or '?'})")
    return True


def _materialize_generated(res: Resources, spec: GeneratedSource, progress: Progress) -> tuple[Path, bool]:
    """Generated models are deterministic per (spec, toolchain), so they are cached under FARM_CACHE,
    and rebuilt from the store where another host made and recorded one."""
    from farm.families.tiny import make_model_request
    from farm.lineage.queries.artifacts import recorded_source

    # The family module's tiny model is part of what is made (the toolchain knows no family), so it
    # is part of the key. exclude_none: a spec without weights_grid keeps its key.
    request = make_model_request(spec.family, config=spec.config, seed=spec.seed, tokenizer=spec.tokenizer,
                                 **({"weights_grid": spec.weights_grid} if spec.weights_grid else {}))
    key = digest({"generated": spec.model_dump(exclude_none=True), "tiny": request["spec"],
                  "toolchain": res.toolchain_id})
    final = res.settings.cache / "sources" / "generated" / key[:16]
    if (final / COMPLETE_MARKER).exists():
        return final, False
    with res.db.session() as s:
        found = recorded_source(s, "generated", folder_name=key[:16])
    if _from_store(res, found, final, key + "\n", progress):
        return final, False
    require_work("making the generated source")
    tmp = final.with_name(final.name + f".tmp-{owner_tag()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        res.toolchain.call("make_model", {**request, "output_dir": str(tmp)}, progress=progress)
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
    require_work("importing the GGUF source")
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


def _materialize_hub(res: Resources, spec: HubSource, progress: Progress, memory=None) -> tuple[Path, str]:
    # The refusals on what the hub says, before a weight is downloaded (a gated repository, remote
    # code, pre-quantized or missing weights, no family, too large); offline, the folder's own
    # checks run on the cached snapshot instead.
    from farm.families import family_architectures
    from farm.refusals import check_source, hub_facts

    require_work("asking the hub for the source's revision")  # it may have moved since the last build
    info = res.toolchain.call("hub_info", {"repo_id": spec.repo_id, "revision": spec.revision,
                                           "cache_dir": str(res.settings.cache / "hf")}, progress=progress)
    if "answer" in info:
        check_source(hub_facts(info["answer"], info["config"], family_architectures(), memory))
    # The commit the hub resolved (or, offline, the commit the config pins): recorded by any host
    # with its files in the store, it is rebuilt from there, not downloaded again.
    from farm.lineage.queries.artifacts import recorded_source

    commit = (info.get("answer") or {}).get("sha") or (
        spec.revision if spec.revision and len(spec.revision) == 40 else None)
    if commit and info.get("answer", {}).get("gated") != "manual":
        final = res.settings.cache / "sources" / "hub" / digest({"repo": spec.repo_id, "commit": commit})[:16]
        if (final / COMPLETE_MARKER).exists():
            return final, commit
        with res.db.session() as s:
            found = recorded_source(s, "hf", repo_id=spec.repo_id, revision=commit)
        if _from_store(res, found, final, commit + "\n", progress):
            return final, commit
    out = res.toolchain.call(
        "fetch_hf",
        {"repo_id": spec.repo_id, "revision": spec.revision, "cache_dir": str(res.settings.cache / "hf")},
        progress=progress,
    )
    return Path(out["model_dir"]), out["revision"]


def resolve_source(res: Resources, cfg: BuildConfig, progress: Progress = stderr_progress) -> SourceResult:
    started = time.monotonic()
    spec = cfg.source
    get_family(cfg.family)
    memory = recorded_peak(res, export_config(cfg)["options"])
    ran = False
    repo_id = revision = None
    if isinstance(spec, LocalSource):
        folder = spec.path
    elif isinstance(spec, HubSource):
        folder, revision = _materialize_hub(res, spec, progress, memory)
        repo_id = spec.repo_id
    elif isinstance(spec, GgufSource):
        folder, ran, info = _materialize_gguf(res, spec, progress)
        pkg = info.get("package") or {}
        # The GGUF file is the real source: its sha256 is the revision, its package the repo.
        repo_id = f"pypi:{pkg['distribution']}=={pkg['version']}" if pkg else str(spec.path)
        revision = f"gguf-sha256:{info['gguf_sha256']}"
    else:
        folder, ran = _materialize_generated(res, spec, progress)
    validate_folder(folder, cfg.family, memory)

    files = hash_folder(folder)
    tok = next(f for f in files if f["path"] == "tokenizer.json")
    source_id = digest({"kind": spec.kind, "repo_id": repo_id, "revision": revision, "files": files})
    generation = generation_settings(folder)

    # Every file into the store (the gates' reference is rebuilt from it); an object already there is
    # not copied again (a 540 MB weights file would be, on every build).
    for f in files:
        if res.store.verify(f["sha256"]) != "ok":
            require_work(f"storing the source file {f['path']}")
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
        record_stored(s, ref, "tokenizer", source_id=source_id)
    return SourceResult(
        status="ran" if ran else "cached",
        seconds=round(time.monotonic() - started, 3),
        source_id=source_id,
        model_dir=str(folder),
        family=cfg.family,
        tokenizer=artifact_ref(res, ref.sha256),
    )


