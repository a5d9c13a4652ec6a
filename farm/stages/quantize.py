"""quantize: apply a recipe and check, rule by rule, what it really did; and check_recipe: whether
the installed quantizer accepts a recipe at all, before a build does any work."""

from __future__ import annotations

import json
from pathlib import Path

from farm.config import BuildConfig
from farm.errors import BadInput
from farm.families import Family, get_family
from farm.lineage.queries.artifacts import artifact_brief
from farm.lineage.record import record_stored, record_recipe
from farm.recipes import Recipe
from farm.resources import Resources
from farm.progress import Progress, stderr_progress
from farm.stages.common import StageResult, cache_key, require_work, run_cached, scratch_dir


def check_recipe(res: Resources, recipe: Recipe) -> None:
    """Bad input, before any work, if the installed quantizer would refuse the recipe: an algorithm
    it does not have, a config its policy refuses for the op (int3, asymmetric int4 blockwise, …).
    The answer is remembered per (toolchain, recipe digest) under FARM_CACHE: a toolchain does not
    change its mind, and a no-op rebuild does not start the quantizer to ask again."""
    import json

    mark = res.settings.cache / "recipe-checks" / f"{res.toolchain_id[:16]}-{recipe.digest()[:32]}.json"
    if mark.is_file():
        return
    out = res.toolchain.call("check_recipe", {"recipe": recipe.render()})
    if not out.get("accepted"):
        errors = out.get("errors") or ["refused"]
        names = [r.name for r in recipe.all_rules()]
        first = errors[0]
        # "entry 2 (…)" -> the rule's own name, which is what the user wrote.
        if first.startswith("entry "):
            idx = first.split()[1]
            if idx.isdigit() and int(idx) < len(names):
                first = f"rule {names[int(idx)]!r}" + first[len(f"entry {idx}"):]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise BadInput(f"recipe {recipe.name!r}: {first}{more}: fix the rule (ai-edge-quantizer "
                       f"{res.toolchain.identity.get('ai-edge-quantizer', '?')} is installed)")
    mark.parent.mkdir(parents=True, exist_ok=True)
    tmp = mark.with_suffix(f".tmp{id(mark)}")
    tmp.write_text(json.dumps({"recipe": recipe.name, "digest": recipe.digest(), "toolchain": res.toolchain_id}))
    tmp.replace(mark)


def check_rules(recipe: Recipe, family: Family, report: list[dict]) -> list[dict]:
    """Every rule must do what it says, read back from the written flatbuffer: each op it governs
    reads back at the rule's bit width (or FLOAT32 for a float rule), and a rule aimed at layers
    the family has (`layers`) must match an op. A rule that governs nothing without naming layers
    is reported (`applies: false`), not refused: `.*` on EMBEDDING_LOOKUP of a model whose
    embedding is a GATHER is not a typo."""
    declared = {r.name: set(r.layers) for r in recipe.all_rules()}
    labels = {r.name: r.label() for r in recipe.all_rules()}
    checked = []
    for rule in report:
        targets = declared.get(rule["name"], set()) & family.layers
        if rule["matched_scopes"] == 0 and targets:
            raise BadInput(
                f"recipe {recipe.name!r}: rule {rule['name']!r} (regex {rule['regex']!r}) matched no op of this "
                f"{family.name} model, which has {', '.join(sorted(targets))} layers: fix the regex"
            )
        if rule["as_expected"] != rule["matched_ops"]:
            read = ", ".join(f"{n} {t}" for t, n in rule["read_back"].items())
            raise BadInput(
                f"recipe {recipe.name!r}: rule {rule['name']!r} says {labels.get(rule['name'], '?')} but of the "
                f"{rule['matched_ops']} ops it governs only {rule['as_expected']} read back so (weights: {read}): "
                "the quantizer did not apply it as written"
            )
        if targets and rule["matched_ops"] == 0:
            raise BadInput(
                f"recipe {recipe.name!r}: rule {rule['name']!r} matches {rule['matched_scopes']} ops but a later rule "
                "overrides it on every one: reorder the rules"
            )
        checked.append({**rule, "label": labels.get(rule["name"]), "applies": rule["matched_ops"] > 0})
    return checked


def quantize(
    res: Resources, cfg: BuildConfig, recipe: Recipe, float_export: StageResult, progress: Progress = stderr_progress
) -> StageResult:
    family = get_family(cfg.family)
    rendered = recipe.render()
    vrec = vision_recipe(cfg)
    # The digest covers the calibration set's sha256 (a static recipe): new text, new key.
    key = cache_key("quantize", float_model=float_export.artifact.sha256, recipe=recipe.digest(), toolchain=res.toolchain_id,
                    **({"vision_recipe": vrec.digest()} if vrec is not None else {}))

    def compute() -> str:
        src = res.store.open_verified_path(float_export.artifact.sha256)
        request = {
            "input_path": str(src),
            "recipe": rendered,
            "rules": recipe.toolchain_rules(),
        }
        if recipe.needs_calibration():
            request["calibration"] = {
                "text_path": str(calibration_text(res, recipe)),
                "tokenizer_path": str(res.store.open_verified_path(_tokenizer_of(res, float_export.artifact.sha256))),
                "samples": recipe.calibration.samples,
                "max_tokens": recipe.calibration.max_tokens,
                "steps": recipe.calibration.steps,
                "generate": recipe.calibration.generate,
            }
        with scratch_dir(res, "quantize") as work:
            out = res.toolchain.call("quantize", {**request, "output_path": str(work / "model_quantized.tflite")},
                                     progress=progress)
            # Checked before anything is stored: a recipe that did not do what it says leaves no trace.
            rules = check_rules(recipe, family, out["rules"])
            ref = res.store.put_file(Path(out["output_path"]))
            parts = _quantize_parts(res, recipe, vrec, float_export, work, progress)
            manifest = None
            if parts:
                # An image build's output: the decoder and its parts, named together. The decoder's
                # bytes can be shared by builds whose vision recipes differ (one artifact, recorded
                # once), so the parts cannot ride on its record: this manifest is the stage's output.
                manifest = {"schema": "litertlm-farm/image-parts/1", "model": ref.sha256,
                            "parts": {role: part["ref"].sha256 for role, part in parts.items()},
                            "image": _float_details(res, float_export.artifact.sha256).get("image"),
                            "vision_recipe": vrec.name, "vision_recipe_digest": vrec.digest()}
                path = work / "image-parts.json"
                path.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n", encoding="utf-8")
                manifest_ref = res.store.put_file(path)
        params = out.get("params") or 0
        with res.db.session() as s:
            record_recipe(s, recipe.digest(), recipe.name, recipe.model_dump(mode="json"), rendered)
            for part in parts.values():
                rcp = part["recipe"]
                record_recipe(s, rcp.digest(), rcp.name, rcp.model_dump(mode="json"), rcp.render())
                record_stored(s, part["ref"], "tflite_part", source_id=_source_of(res, float_export.artifact.sha256),
                              toolchain_id=res.toolchain_id, recipe_digest=rcp.digest(),
                              inputs={"float_model": part["float"]}, details=part["details"])
            record_stored(
                s,
                ref,
                "quantized_tflite",
                source_id=_source_of(res, float_export.artifact.sha256),
                toolchain_id=res.toolchain_id,
                recipe_digest=recipe.digest(),
                inputs={"float_model": float_export.artifact.sha256},
                details={
                    "rules": rules,
                    # The float rules' rows, under the name lineage records made before rules had.
                    "exceptions": [{**r, "float32_ops": r["as_expected"]} for r in rules if r["expected_bits"] is None],
                    "calibration": ({"sha256": recipe.calibration_sha256, "file": recipe.calibration.file,
                                     "samples": out.get("calibration_samples")} if recipe.calibration else None),
                    "quantized_ops": out.get("quantized_ops"),
                    "float_ops": out.get("float_ops"),
                    "params": params,
                    # Weight bytes (constant buffers) per float parameter: the recipe's real cost,
                    # without the graph overhead that dominates a tiny model's file size.
                    "weight_bytes": out.get("weight_bytes"),
                    "bytes_per_param": round(out["weight_bytes"] / params, 4) if params else None,
                    "float_bytes": float_export.artifact.size,
                    "toolchain_peak_rss_bytes": out.get("peak_rss_bytes"),
                },
            )
            if manifest is not None:
                record_stored(s, manifest_ref, "image_parts", source_id=_source_of(res, float_export.artifact.sha256),
                              toolchain_id=res.toolchain_id, recipe_digest=recipe.digest(),
                              inputs={"model": ref.sha256, **manifest["parts"]}, details=manifest)
        return manifest_ref.sha256 if manifest is not None else ref.sha256

    return run_cached(res, "quantize", key, compute)


def vision_recipe(cfg: BuildConfig) -> Recipe | None:
    """The recipe of an image build's vision encoder and adapter (`vision.recipe`), or None."""
    from farm.recipes import RECIPES_DIR, load_recipe

    return load_recipe(cfg.vision.recipe, RECIPES_DIR) if cfg.vision is not None else None


def _float_details(res: Resources, sha: str) -> dict:
    from farm.lineage.queries.artifacts import artifact_details

    with res.db.session() as s:
        return artifact_details(s, sha)


def _quantize_parts(res: Resources, recipe: Recipe, vrec: Recipe | None, float_export: StageResult, work: Path,
                    progress: Progress) -> dict[str, dict]:
    """An image export's other graphs, each by its recipe: the embedder by the build's (it is the
    text build's token table, moved out of the decoder), the vision encoder and adapter by the
    vision recipe. What each rule did is recorded as the quantizer reports it: the decoder's
    layer checks do not apply to graphs that have none of its layers."""
    float_parts = _float_details(res, float_export.artifact.sha256).get("parts") or {}
    if float_parts and vrec is None:
        raise BadInput("this float export carries vision parts but the config has no `vision:` section")
    done: dict[str, dict] = {}
    for role, sha in sorted(float_parts.items()):
        rcp = recipe if role == "embedder" else vrec
        src = res.store.open_verified_path(sha)
        progress(f"quantizing the {role} with recipe {rcp.name}")
        out = res.toolchain.call("quantize", {"input_path": str(src), "recipe": rcp.render(),
                                              "rules": rcp.toolchain_rules(), "output_path": str(work / f"{role}.tflite")},
                                 progress=progress)
        done[role] = {"ref": res.store.put_file(Path(out["output_path"])), "recipe": rcp, "float": sha,
                      "details": {"role": role, "rules": out["rules"], "quantized_ops": out.get("quantized_ops"),
                                  "float_ops": out.get("float_ops"), "weight_bytes": out.get("weight_bytes"),
                                  "params": out.get("params")}}
    return done


def _source_of(res: Resources, sha: str) -> str | None:
    with res.db.session() as s:
        a = artifact_brief(s, sha)
        return a["source_id"] if a else None


def _tokenizer_of(res: Resources, sha: str) -> str:
    """The tokenizer.json the source of this float export recorded (a static recipe calibrates on
    text tokenized by the model's own tokenizer)."""
    from farm.lineage.queries.artifacts import source_tokenizer

    with res.db.session() as s:
        tok = source_tokenizer(s, sha)
    if tok is None:
        raise BadInput(f"float export {sha[:12]} has no recorded tokenizer: a static recipe needs one to calibrate")
    return tok


def calibration_text(res: Resources, recipe: Recipe) -> Path:
    """The calibration text a static recipe's digest names, from the store (content-addressed by
    that sha256: a rebuild on another host or from another checkout finds it there). The loader's
    file goes into the store the first time, if it is still those bytes; otherwise this refuses."""
    import hashlib

    sha = recipe.calibration_sha256
    if sha and res.store.verify(sha) == "ok":
        return res.store.open_verified_path(sha)
    path = Path(recipe.calibration_path or "")
    if not path.is_file():
        raise BadInput(f"recipe {recipe.name!r}: calibration text sha256 {sha} is not in the store and the file "
                       f"{str(path)!r} is gone: restore it")
    if hashlib.sha256(path.read_bytes()).hexdigest() != sha:
        raise BadInput(f"recipe {recipe.name!r}: calibration file {str(path)!r} changed since the recipe was "
                       "read (its sha256 is part of the recipe's digest): load the recipe again")
    require_work("storing the calibration text")
    res.store.put_file(path)
    return res.store.open_verified_path(sha)


