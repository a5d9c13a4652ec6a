"""convert: float export with litert-torch (quantization_recipe="none": None means int8!)."""

from __future__ import annotations

from pathlib import Path

from farm.config import BuildConfig
from farm.errors import BadInput
from farm_common import export_options
from farm.digest import digest
from farm.lineage.record import record_stored
from farm.resources import Resources
from farm.progress import Progress, stderr_progress
from farm.refusals.base import memory_mode
from farm.export_settings import export_config
from farm.stages.common import StageResult, cache_key, run_cached, scratch_dir
from farm.stages.source import SourceResult


def check_export_options(res: Resources, config_name: str, options: dict) -> None:
    """Bad input, before any work, for an export option (`export_config(cfg)["options"]`) the
    installed litert-torch does not take or of a type it does not declare (its own annotations:
    farm_toolchain/export.py options_schema; the check: farm_common/export_options.py). The
    toolchain's answer is kept per toolchain under FARM_CACHE, so a build asks it once."""
    import json

    if not options:
        return
    mark = res.settings.cache / "export-options" / f"{res.toolchain_id[:16]}.json"
    try:
        schema = json.loads(mark.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        schema = res.toolchain.call("export_options", {})
        mark.parent.mkdir(parents=True, exist_ok=True)
        tmp = mark.with_suffix(f".tmp{id(mark)}")
        tmp.write_text(json.dumps(schema))
        tmp.replace(mark)
    wrong = export_options.check(options, schema["options"], f"litert-torch {schema['litert-torch']}")
    if wrong:
        raise BadInput(f"config {config_name!r}: {wrong}: fix export.options")


def export_digest(family: str, exp: dict, converter: dict) -> str:
    """What a converter-side defect is shared by: family, converter options and converter version
    (not the prefill/cache lengths). Bundles whose float exports share it are siblings of a failure
    of the float export or of a fused-op graph (flows/gates.py)."""
    return digest({"family": family, "options": exp["options"], "converter": converter})


def convert(res: Resources, cfg: BuildConfig, source: SourceResult, progress: Progress = stderr_progress) -> StageResult:
    exp = export_config(cfg)
    key = cache_key("convert", source=source.source_id, family=cfg.family, export=exp, toolchain=res.toolchain_id)

    def compute() -> str:
        _require_room(res, Path(source.model_dir))
        with scratch_dir(res, "convert") as work:
            out, replayed = _export(res, key, {"model_dir": source.model_dir, "output_dir": str(work), **exp}, progress)
            ref = res.store.put_file(Path(out["tflite_path"]))
            parts = {role: res.store.put_file(Path(path)) for role, path in (out.get("parts") or {}).items()}
        converter = {"litert-torch": res.toolchain.versions["packages"].get("litert-torch")}
        with res.db.session() as s:
            # An image export's other graphs (embedder, vision encoder, adapter), float, each on record
            # with its role; the decoder's record names them (the quantize stage reads them there).
            for role, part in parts.items():
                record_stored(s, part, "tflite_part", source_id=source.source_id, toolchain_id=res.toolchain_id,
                              details={"role": role, "float": True, "export_config": exp})
            record_stored(
                s,
                ref,
                "float_tflite",
                source_id=source.source_id,
                toolchain_id=res.toolchain_id,
                details={
                    "export_config": exp,
                    "converter": converter,
                    "export_digest": export_digest(cfg.family, exp, converter),
                    "signatures": out.get("signatures", {}),
                    "export_seconds": out.get("seconds"),
                    # The export's peak memory and the source's parameter estimate: the basis on
                    # which a later source too large for a machine is refused (farm/refusals/).
                    "peak_rss_bytes": out.get("peak_rss_bytes"),
                    "source_params": source_params(Path(source.model_dir)),
                    # what that peak predicts: exports made the same way (farm/refusals/base.py)
                    "memory_mode": memory_mode(exp["options"]),
                    **({"source_grid": out["source_grid"]} if "source_grid" in out else {}),
                    **({"parts": {role: part.sha256 for role, part in parts.items()}, "image": out["image"]}
                       if parts else {}),
                    # the converter's files and figures kept by another farm under this stage's key
                    **({"export_replayed": True} if replayed else {}),
                },
            )
        return ref.sha256

    return run_cached(res, "convert", key, compute)


def _export(res: Resources, key: str, request: dict, progress: Progress) -> tuple[dict, bool]:
    """The toolchain's export reply, or the one kept under this stage's key in FARM_EXPORT_CACHE
    (farm/export_cache.py) and whether it was replayed from there."""
    from farm import export_cache

    cache = res.settings.export_cache
    if cache is not None and (kept := export_cache.replay(cache, key)) is not None:
        progress(f"convert: the float export kept under this stage's key in {cache} (FARM_EXPORT_CACHE)")
        return kept, True
    out = res.toolchain.call("export", request, progress=progress)
    if cache is not None:
        export_cache.keep(cache, key, out)
    return out, False


def _require_room(res: Resources, model_dir: Path) -> None:
    """Room for the float export before converting (float32: 4 bytes per parameter, in the scratch
    folder, and again in a local store): a full disk named before minutes of export, not as the
    converter's "LLVM ERROR: IO failure on output stream" in its log."""
    from farm.disk import require

    params = source_params(model_dir)
    if not params:
        return
    copies = 2 if res.settings.resolved_store_url.startswith("file://") else 1
    require(res.settings.work_dir, int(4 * params * copies * 1.05), f"converting {model_dir.name} ({params:,} parameters)")


def source_params(folder: Path) -> int | None:
    """The parameter estimate refusals use (weights' bytes over the config's dtype), for a folder."""
    import json

    from farm.refusals import estimated_params

    files = {p.name: p.stat().st_size for p in folder.glob("*.safetensors")}
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    return estimated_params(files, config)
