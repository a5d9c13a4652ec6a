"""quantize: apply a recipe (with per-op float exceptions) and check what it really did."""

from __future__ import annotations

from pathlib import Path

from farm.config import BuildConfig
from farm.errors import BadInput
from farm.families import Family, get_family
from farm.lineage.queries import artifact_brief
from farm.lineage.record import record_artifact, record_recipe
from farm.recipes import Recipe
from farm.resources import Resources
from farm.stages.common import Progress, StageResult, cache_key, run_cached, scratch_dir, stderr_progress


def check_exceptions(recipe: Recipe, family: Family, report: list[dict]) -> list[dict]:
    """Every float exception must keep float what it names. An exception that matched nothing on a
    family that has the layers it names is a broken regex; its op weights must read back FLOAT32."""
    declared = {e.name: set(e.layers) for e in recipe.float_exceptions}
    checked = []
    for exc in report:
        targets = declared.get(exc["name"], set()) & family.layers
        if exc["matched_ops"] == 0 and targets:
            raise BadInput(
                f"recipe {recipe.name!r}: float exception {exc['name']!r} (regex {exc['regex']!r}) matched "
                f"no op of this {family.name} model, which has {', '.join(sorted(targets))} layers: fix the regex"
            )
        if exc["float32_ops"] != exc["matched_ops"]:
            raise BadInput(
                f"recipe {recipe.name!r}: float exception {exc['name']!r} matched {exc['matched_ops']} ops "
                f"but only {exc['float32_ops']} kept FLOAT32 weights: a later recipe entry overrides it"
            )
        checked.append({**exc, "applies": exc["matched_ops"] > 0})
    return checked


def quantize(
    res: Resources, cfg: BuildConfig, recipe: Recipe, float_export: StageResult, progress: Progress = stderr_progress
) -> StageResult:
    family = get_family(cfg.family)
    rendered = recipe.render()
    key = cache_key("quantize", float_model=float_export.artifact.sha256, recipe=recipe.digest(), toolchain=res.toolchain_id)

    def compute() -> str:
        src = res.store.open_verified_path(float_export.artifact.sha256)
        with scratch_dir(res, "quantize") as work:
            out = res.toolchain.call(
                "quantize",
                {
                    "input_path": str(src),
                    "output_path": str(work / "model_quantized.tflite"),
                    "recipe": rendered,
                    "exceptions": recipe.toolchain_exceptions(),
                },
                progress=progress,
            )
            # Checked before anything is stored: a recipe that did not do what it says leaves no trace.
            exceptions = check_exceptions(recipe, family, out["exceptions"])
            ref = res.store.put_file(Path(out["output_path"]))
        params = out.get("params") or 0
        with res.db.session() as s:
            record_recipe(s, recipe.digest(), recipe.name, recipe.model_dump(mode="json"), rendered)
            record_artifact(
                s,
                sha256=ref.sha256,
                kind="quantized_tflite",
                size=ref.size,
                uri=ref.uri,
                source_id=_source_of(res, float_export.artifact.sha256),
                toolchain_id=res.toolchain_id,
                recipe_digest=recipe.digest(),
                inputs={"float_model": float_export.artifact.sha256},
                details={
                    "exceptions": exceptions,
                    "quantized_ops": out.get("quantized_ops"),
                    "float_ops": out.get("float_ops"),
                    "params": params,
                    # Weight bytes (constant buffers) per float parameter: the recipe's real cost,
                    # without the graph overhead that dominates a tiny model's file size.
                    "weight_bytes": out.get("weight_bytes"),
                    "bytes_per_param": round(out["weight_bytes"] / params, 4) if params else None,
                    "float_bytes": float_export.artifact.size,
                },
            )
        return ref.sha256

    return run_cached(res, "quantize", key, compute)


def _source_of(res: Resources, sha: str) -> str | None:
    with res.db.session() as s:
        a = artifact_brief(s, sha)
        return a["source_id"] if a else None
