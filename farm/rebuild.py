"""rebuild: make a recorded bundle again from its recorded inputs in a clean working area and say
MATCH, or which sections differ and why (the check hf-to-litertlm's `verify` does from its lock file).

The recorded inputs are the build config the package stage recorded with the bytes (source spec,
export options, metadata), the recipe body from lineage, and the source as the config names it (the
hub repo at its pinned revision, the local folder, the generated spec, the GGUF package). The clean
working area is a scratch farm (its own lineage DB and store under FARM_HOME/work; the toolchain
and model caches are shared), so no cache hit can stand in for a stage: every stage runs. Where a
section differs, the inputs are compared one by one (each source file's sha256, the toolchain's
exact versions, the float export, the quantized model) to say why.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from typing import Any

from farm.config import BuildConfig
from farm.errors import BadInput
from farm.lineage.queries.artifacts import lineage, resolve_sha
from farm.pipeline import Job, bundle_of, run_stages
from farm.preflight import preflight
from farm.recipes import Recipe
from farm.resources import Resources
from farm.progress import Progress, stderr_progress


def recorded_inputs(rec: dict[str, Any]) -> tuple[BuildConfig, Recipe]:
    """The config and recipe a farm-built bundle was made from, as recorded."""
    if rec["kind"] != "litertlm":
        raise BadInput(f"{rec['sha256'][:12]} is a {rec['kind']}, not a bundle: rebuild takes a .litertlm sha256")
    if rec.get("imported"):
        raise BadInput(f"{rec['sha256'][:12]} was imported, not built here: there are no recorded inputs to "
                       "rebuild it from (its gates check it against its claimed source)")
    config = (rec.get("details") or {}).get("config")
    body = (rec.get("recipe") or {}).get("body")
    if not config or not body:
        raise BadInput(f"{rec['sha256'][:12]} was built before the farm recorded build configs with bundles: "
                       "build its config again (`farm build CONFIG`), then rebuild the new file")
    recipe = Recipe.model_validate(body)
    return BuildConfig.model_validate({**config, "recipe": recipe.name}), recipe


def _why(rec: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Which recorded input differs from the rebuild's, most upstream first."""
    out = []
    old_files = {f["path"]: f["sha256"] for f in (rec.get("source") or {}).get("files") or []}
    new_files = {f["path"]: f["sha256"] for f in (new.get("source") or {}).get("files") or []}
    for path in sorted(old_files.keys() | new_files.keys()):
        if old_files.get(path) != new_files.get(path):
            out.append(f"source file {path}: recorded {str(old_files.get(path))[:12]}, now "
                       f"{str(new_files.get(path))[:12]}")
    old_tc = (rec.get("toolchain") or {}).get("packages") or {}
    new_tc = (new.get("toolchain") or {}).get("packages") or {}
    for pkg in sorted(old_tc.keys() | new_tc.keys()):
        if old_tc.get(pkg) != new_tc.get(pkg):
            out.append(f"toolchain {pkg}: recorded {old_tc.get(pkg)}, now {new_tc.get(pkg)}")
    if (rec.get("toolchain") or {}).get("id") != (new.get("toolchain") or {}).get("id") and not any(
            x.startswith("toolchain") for x in out):
        out.append("toolchain: the pip freeze differs (same key versions)")
    fa, fb = (rec.get("float_export") or {}).get("sha256"), (new.get("float_export") or {}).get("sha256")
    if fa != fb:
        out.append(f"float export: recorded {str(fa)[:12]}, rebuilt {str(fb)[:12]}")
    qa = ((rec.get("recipe") or {}).get("quantized_model") or {}).get("sha256")
    qb = ((new.get("recipe") or {}).get("quantized_model") or {}).get("sha256")
    if qa != qb:
        out.append(f"quantized model: recorded {str(qa)[:12]}, rebuilt {str(qb)[:12]}")
    return out


def rebuild(res: Resources, ref: str, progress: Progress = stderr_progress) -> dict[str, Any]:
    from farm.lineage.queries.sections import section_diff
    from farm.settings import Settings

    started = time.monotonic()
    with res.db.session() as s:
        rec = lineage(s, resolve_sha(s, ref))
    cfg, recipe = recorded_inputs(rec)
    job = Job(config=cfg, recipe=recipe, build_command=(rec.get("details") or {}).get("build_command"))
    res.settings.work_dir.mkdir(parents=True, exist_ok=True)
    area = tempfile.mkdtemp(prefix="rebuild-", dir=res.settings.work_dir)
    # A new Settings, not model_copy: the resolved URLs are cached properties a copy would carry over.
    # No export cache: a rebuild runs the converter again, or MATCH would compare kept bytes with themselves.
    scratch = Resources(Settings(**{**res.settings.model_dump(), "home": area, "database_url": None,
                                    "store_url": None, "export_cache": None}), runtime=res.runtime)
    try:
        preflight(scratch, job, gates=False)  # a rebuild compares bytes: no gate runs
        bundle = bundle_of(run_stages(scratch, job, progress=progress))
        with scratch.db.session() as s:
            new = lineage(s, bundle.artifact.sha256)
    finally:
        if "toolchain" in scratch.__dict__:
            scratch.toolchain.close()
        if "db" in scratch.__dict__:
            scratch.db.engine.dispose()
        shutil.rmtree(area, ignore_errors=True)
    diff = section_diff(rec["sections"], new["sections"])
    match = new["sha256"] == rec["sha256"]
    return {
        "sha256": rec["sha256"], "rebuilt_sha256": new["sha256"], "match": match,
        "verdict": "MATCH" if match else "DIFFERS",
        "sections": [{"type": d["type"], "status": d["status"], "recorded": d.get("old_sha256"),
                      "rebuilt": d.get("new_sha256")} for d in diff],
        "why": [] if match else _why(rec, new),
        "seconds": round(time.monotonic() - started, 1),
    }
