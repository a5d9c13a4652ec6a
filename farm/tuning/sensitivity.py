"""Sensitivity: what each op group costs when quantized, measured on held-out text.

From the cached float export (the pipeline's source and convert stages), the toolchain's
`sensitivity` command applies one treatment to every op group of the family (one real
quantization), reads each group's weights back from the written file and scores the model with
that group alone replaced, teacher-forced against the float reference on the shipped held-out text
(farm_toolchain/sensitivity.py says how, and how the simulation is checked against the Interpreter).
Each treatment's measurement is recorded in lineage (`quality_measurements`) keyed by what was
measured: the same float export, text, treatment, positions and toolchain is measured once."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from farm.digest import digest
from farm.errors import BadInput
from farm.families import get_family
from farm.lineage.queries.tuning import quality_measurement
from farm.lineage.record import record_quality_measurement
from farm.pipeline import Job, StageRunner, run_stages
from farm.progress import Progress, stderr_progress
from farm.recipes import RECIPES_DIR
from farm.recipes.source_grid import offsets_rule
from farm.recipes.treatments import Treatment
from farm.resources import Resources
from farm.stages.common import scratch_dir

#: The held-out evaluation text (never the calibration text: recipes/calibration/).
EVAL_TEXT = RECIPES_DIR / "evaluation" / "heldout-en.txt"
#: The calibration a static treatment's activation ranges come from: the shipped static recipe's.
CALIBRATION_RECIPE = "static_wi8_ai16"
#: Bump when the measurement changes: older rows are not reused.
VERSION = 1
POSITIONS = 2048
WINDOW = 512
INTERPRETER_POSITIONS = 32


def text_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def float_export(res: Resources, job: Job, progress: Progress = stderr_progress,
                 run: StageRunner | None = None) -> dict[str, Any]:
    """The float export and the source folder it came from (the source and convert stages, cached;
    `run` runs a stage: the flows pass their Prefect task runner)."""
    done = run_stages(res, job, run, progress=progress, until="convert")
    return {"float_sha256": done["convert"].artifact.sha256, "model_dir": done["source"].model_dir,
            "source_id": done["source"].source_id, "stages": [
                {"name": s.name, "status": s.status, "seconds": s.seconds} for s in done.values()]}


def _calibration(res: Resources, float_sha: str) -> dict[str, Any]:
    """The calibration request of the shipped static recipe, tokenized by this model's tokenizer."""
    from farm.lineage.queries.artifacts import source_tokenizer
    from farm.recipes import load_recipe

    recipe = load_recipe(CALIBRATION_RECIPE, RECIPES_DIR)
    with res.db.session() as s:
        tok = source_tokenizer(s, float_sha)
    if tok is None:
        raise BadInput(f"float export {float_sha[:12]} has no recorded tokenizer: a static treatment calibrates with it")
    c = recipe.calibration
    return {"text_path": recipe.calibration_path, "sha256": recipe.calibration_sha256,
            "tokenizer_path": str(res.store.open_verified_path(tok)), "samples": c.samples, "max_tokens": c.max_tokens,
            "steps": c.steps, "generate": c.generate}


def _grid_entry(job: Job) -> dict[str, Any] | None:
    """On a source-grid export, the offsets entry every quantization of the sweep ends with (the
    rule every source-grid recipe ends with), else None."""
    if not job.config.export.source_grid:
        return None
    rule = offsets_rule()
    return {"algorithm_key": rule.algorithm_key, "op_config": rule.op_config()}


def sweep_name(treatment: Treatment, overrides: dict[str, Treatment]) -> str:
    return treatment.name + "".join(f"+{g}={t.name}" for g, t in sorted(overrides.items()))


def _request_treatment(treatment: Treatment, overrides: dict[str, Treatment]) -> dict[str, Any]:
    out = {**treatment.entry(), "name": sweep_name(treatment, overrides)}
    if overrides:
        out["overrides"] = {g: (t.entry() if t.mode != "float" else {"name": "float", "algorithm_key": "no_quantize"})
                            for g, t in overrides.items()}
    return out


def measure_sweeps(res: Resources, job: Job, treatments: list[Treatment], overrides: dict[str, Treatment] | None = None,
                   positions: int = POSITIONS, window: int = WINDOW, text: Path = EVAL_TEXT,
                   only_groups: list[str] | None = None, fresh: bool = False,
                   progress: Progress = stderr_progress, run: StageRunner | None = None) -> dict[str, Any]:
    """Each treatment on every group, each group scored alone: from lineage when this exact
    measurement is recorded (unless `fresh`), else measured now and recorded."""
    overrides = overrides or {}
    if any(t.mode == "float" for t in treatments):
        raise BadInput("float is not a treatment to sweep (it is the reference): name a quantized treatment")
    fe = float_export(res, job, progress, run)
    family = get_family(job.config.family)
    tsha = text_sha(text)
    calibration = _calibration(res, fe["float_sha256"]) if any(
        t.calibrated for t in [*treatments, *overrides.values()]) else None
    grid = _grid_entry(job)
    base = {"kind": "treatment", "calibration": {k: v for k, v in (calibration or {}).items()
                                                 if k not in ("text_path", "tokenizer_path")}, "float": fe["float_sha256"], "text": tsha, "positions": positions, "window": window,
            "version": VERSION, "toolchain": res.toolchain_id, "only": sorted(only_groups or [])}
    if grid:
        base["source_grid"] = grid
    planned = []
    for t in treatments:
        req = _request_treatment(t, overrides)
        key = digest({**base, "treatment": {k: v for k, v in req.items() if k != "name"}})
        planned.append((t, req, key))
    found: dict[str, dict] = {}
    if not fresh:
        with res.db.session() as s:
            for _t, _req, key in planned:
                row = quality_measurement(s, key)
                if row is not None:
                    found[key] = row
    todo = [(t, req, key) for t, req, key in planned if key not in found]
    measured: dict[str, dict] = {}
    common: dict[str, Any] = {}
    if todo:
        request = {"float_path": str(res.store.open_verified_path(fe["float_sha256"])), "model_dir": fe["model_dir"],
                   "text_path": str(text), "positions": positions, "window": window,
                   "interpreter_positions": INTERPRETER_POSITIONS,
                   "prefill_length": min(job.config.export.prefill_lengths),
                   "patterns": [g.request() for g in family.groups], "treatments": [req for _t, req, _k in todo]}
        if only_groups:
            request["only_groups"] = list(only_groups)
        if grid:
            request["source_grid"] = grid
        if calibration:
            request["calibration"] = calibration
        with scratch_dir(res, "sensitivity") as work:
            out = res.toolchain.call("sensitivity", {**request, "work_dir": str(work)}, progress=progress)
        common = {k: out[k] for k in ("groups", "ungrouped", "params", "weight_bytes", "tokens", "positions", "windows",
                                      "window", "reference")}
        with res.db.session() as s:
            for (t, req, key), result in zip(todo, out["treatments"]):
                measured[key] = {**result, **common}
                record_quality_measurement(
                    s, measure_key=key, kind="treatment", float_sha256=fe["float_sha256"], treatment=req["name"],
                    treatment_digest=digest(req), text_sha256=tsha, positions=positions, window=window,
                    version=VERSION, toolchain_id=res.toolchain_id, result=measured[key],
                    seconds=float(result.get("seconds") or 0.0))
    sweeps = []
    for t, req, key in planned:
        if key in found:
            sweeps.append({**found[key]["result"], "reused": True, "measured_at": found[key]["created_at"]})
        else:
            sweeps.append({**measured[key], "reused": False})
    first = sweeps[0]
    return {"config": job.config.name, "model_id": job.config.model_id, "family": family.name,
            "float_sha256": fe["float_sha256"], "source_id": fe["source_id"], "model_dir": fe["model_dir"],
            "stages": fe["stages"],
            "text": {"path": str(text), "sha256": tsha, "tokens": first.get("tokens")},
            "positions": first.get("positions"), "window": first.get("window"), "windows": first.get("windows"),
            "reference": first.get("reference"), "groups": first.get("groups"), "ungrouped": first.get("ungrouped"),
            "params": first.get("params"), "weight_bytes": first.get("weight_bytes"),
            "sweeps": sweeps}


def table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (group, treatment) measured: the figures and what the group saves, sorted by KL
    per megabyte saved, worst first (the groups to keep at higher precision)."""
    groups = {g["name"]: g for g in report["groups"] or []}
    rows = []
    for sweep in report["sweeps"]:
        for r in sweep.get("scores", []):
            g = groups.get(r["group"], {})
            saved = (g.get("float_bytes") or 0) - r["bytes"]
            rows.append({"group": r["group"], "treatment": r.get("treatment") or sweep["name"], "sweep": sweep["name"],
                         "kl": r["kl"], "top1": r["top1"],
                         "nll_delta": r["nll_delta"], "weight_rel_error": r.get("weight_rel_error"),
                         "params": g.get("params"), "float_bytes": g.get("float_bytes"), "bytes": r["bytes"],
                         "saved_bytes": saved, "stored": r.get("stored"), "simulated": r.get("simulated"),
                         "kl_per_mb_saved": r["kl"] / (saved / 1e6) if saved > 0 else None})
    rows.sort(key=lambda r: (-(r["kl_per_mb_saved"] if r["kl_per_mb_saved"] is not None else float("inf")), -r["kl"]))
    return rows


def by_group(report: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """{group: {treatment: its row}} (what a recipe search chooses from)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in table(report):
        out.setdefault(row["group"], {})[row["treatment"]] = row
    return out


def groups_of(res: Resources, job: Job, float_sha: str) -> dict[str, Any]:
    """The family's op groups in this float export, with their parameters and float bytes, and the
    export's total parameters and weight bytes (no model is loaded: a read of the flatbuffer)."""
    family = get_family(job.config.family)
    return res.toolchain.call("sensitivity", {"float_path": str(res.store.open_verified_path(float_sha)),
                                              "patterns": [g.request() for g in family.groups], "groups_only": True})


def measure_candidate(res: Resources, job: Job, fe: dict[str, Any], quantized_sha: str, positions: int = POSITIONS,
                      window: int = WINDOW, text: Path = EVAL_TEXT, progress: Progress = stderr_progress) -> dict[str, Any]:
    """A whole quantized model (a recipe search's candidate, stored by the quantize stage) scored on
    the held-out text, and checked through the Interpreter; recorded once per (bytes, text,
    positions, toolchain)."""
    family = get_family(job.config.family)
    tsha = text_sha(text)
    key = digest({"kind": "candidate", "artifact": quantized_sha, "text": tsha, "positions": positions, "window": window,
                  "version": VERSION, "toolchain": res.toolchain_id})
    with res.db.session() as s:
        row = quality_measurement(s, key)
    if row is not None:
        return {**row["result"], "reused": True}
    request = {"float_path": str(res.store.open_verified_path(fe["float_sha256"])), "model_dir": fe["model_dir"],
               "text_path": str(text), "positions": positions, "window": window,
               "interpreter_positions": INTERPRETER_POSITIONS, "prefill_length": min(job.config.export.prefill_lengths),
               "patterns": [g.request() for g in family.groups],
               "candidates": [{"name": quantized_sha[:12], "quantized_path": str(res.store.open_verified_path(quantized_sha))}]}
    if (grid := _grid_entry(job)) is not None:
        request["source_grid"] = grid
    out = res.toolchain.call("sensitivity", request, progress=progress)
    result = {**out["candidates"][0], "positions": out["positions"], "reference": out["reference"]}
    with res.db.session() as s:
        record_quality_measurement(
            s, measure_key=key, kind="candidate", float_sha256=fe["float_sha256"], artifact_sha256=quantized_sha,
            treatment=None, treatment_digest=None, text_sha256=tsha, positions=positions, window=window, version=VERSION,
            toolchain_id=res.toolchain_id, result=result, seconds=float(out.get("seconds") or 0.0))
    return {**result, "reused": False}
