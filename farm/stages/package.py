"""package: a reproducible .litertlm bundle (same inputs -> same sha256)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm.config import BuildConfig
from farm.families import get_family
from farm.lineage.record import record_stored
from farm.recipes import Recipe
from farm.resources import Resources
from farm.progress import Progress, stderr_progress
from farm.stages.common import StageResult, cache_key, run_cached, scratch_dir
from farm.stages.source import SourceResult


def package(
    res: Resources,
    cfg: BuildConfig,
    recipe: Recipe,
    source: SourceResult,
    model: StageResult,
    progress: Progress = stderr_progress,
    build_command: str | None = None,
) -> StageResult:
    """`build_command`: the command line that built it, for its card (recorded with the bytes the
    first time they are made; the cache key leaves it out: the bytes do not depend on it)."""
    meta = {"prefill_lengths": cfg.export.prefill_lengths, "cache_length": cfg.export.cache_length}
    # An image build's quantize stage hands over a manifest (farm/stages/quantize.py): the decoder
    # and its parts; a text build's, the decoder itself.
    q = _details(res, model.artifact.sha256) if model.artifact.kind == "image_parts" else {}
    decoder = q.get("model") or model.artifact.sha256
    parts, image = q.get("parts") or {}, q.get("image")
    family = get_family(cfg.family)
    model_type = family.image_llm_model_type if parts else family.llm_model_type
    key = cache_key(
        "package", source=source.source_id, model=model.artifact.sha256, family=cfg.family,
        metadata=meta, toolchain=res.toolchain_id, llm_model_type=model_type,
        **({"parts": parts} if parts else {}),
    )
    name = cfg.bundle_name(recipe.name)

    def compute() -> str:
        tflite = res.store.open_verified_path(decoder)
        with scratch_dir(res, "package") as work:
            out = res.toolchain.call(
                "package",
                {
                    "model_dir": source.model_dir,
                    "tflite_path": str(tflite),
                    "output_path": str(work / name),
                    **meta,
                    "end_of_turn": get_family(cfg.family).end_of_turn,
                    "llm_model_type": model_type,
                    # The builder's uuid and timestamp are derived from the cache key, i.e. from
                    # the inputs, so identical inputs give a byte-identical bundle.
                    "reproducible_seed": key,
                    **({"parts": {role: str(res.store.open_verified_path(sha)) for role, sha in parts.items()},
                        "image": image} if parts else {}),
                },
                progress=progress,
            )
            ref = res.store.put_file(Path(out["output_path"]))
        with res.db.session() as s:
            record_stored(
                s,
                ref,
                "litertlm",
                name=name,
                chain=cfg.chain(recipe.name),
                model_id=cfg.model_id,
                source_id=source.source_id,
                toolchain_id=res.toolchain_id,
                recipe_digest=recipe.digest(),
                inputs={"model": decoder, "tokenizer": source.tokenizer.sha256, **parts,
                        **({"image_parts": model.artifact.sha256} if parts else {})},
                details={
                    "stop_tokens": out.get("stop_tokens"),
                    "llm_model_type": out.get("llm_model_type"),
                    # What the package stage fixed in the builder's metadata (issue 18): the card
                    # says each one.
                    "fixes": out.get("fixes") or [],
                    "toolchain_peak_rss_bytes": out.get("peak_rss_bytes"),
                    "start_token": out.get("start_token"),
                    "has_executor_metadata": out.get("has_executor_metadata"),
                    "metadata": meta,
                    # What `farm gate SHA` runs by default for this bundle (the build's gate config,
                    # the recipe's allowances under it).
                    "gates_config": cfg.gates.model_dump(mode="json"),
                    # What the recipe's bytes are allowed to cost, and why (farm/recipes/allowances.py).
                    "allowances": _allowances(recipe),
                    # What the card says that lineage cannot know (license, task, source URL).
                    "card": cfg.card.model_dump(mode="json"),
                    "model_id": cfg.model_id,
                    # The validated build config: what `rebuild` and the deployments rebuild from,
                    # on any worker (no path that exists only on the host that built it).
                    "config": cfg.model_dump(mode="json"),
                    "build_command": build_command,
                    # An image bundle's contract (size, soft tokens, positions per image) and the
                    # recipe of its vision encoder: what its gates and card read.
                    **({"image": image, "vision_recipe": q.get("vision_recipe")} if parts else {}),
                },
            )
        return ref.sha256

    return run_cached(res, "package", key, compute)


def _details(res: Resources, sha: str) -> dict[str, Any]:
    from farm.lineage.queries.artifacts import artifact_details

    with res.db.session() as s:
        return artifact_details(s, sha)


def _allowances(recipe: Recipe) -> dict[str, Any]:
    a = recipe.allowances_in_force()
    return {"class": a["class"], "declared": a["declared"], "basis": a["basis"],
            "values": a["allowances"].model_dump(exclude_none=True, exclude={"basis"})}
