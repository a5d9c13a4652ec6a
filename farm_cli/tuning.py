"""Commands that find recipes by measurement: sensitivity, tune."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from farm_cli._common import _emit, _guard, _log_line, app, configure_prefect_env, get_settings, json_flag


def _overrides(pairs: list[str] | None) -> dict[str, str]:
    from farm.errors import BadInput
    from farm.recipes.treatments import parse_treatment

    out: dict[str, str] = {}
    for p in pairs or []:
        group, sep, treatment = p.partition("=")
        if not sep or not group or not treatment:
            raise BadInput(f"--set {p!r}: write GROUP=TREATMENT, e.g. --set layer3.mlp=int2_c")
        out[group] = parse_treatment(treatment).name
    return out


@app.command()
def sensitivity(
    config: Path = typer.Argument(..., help="Build config YAML (see examples/)."),
    treatments: Optional[list[str]] = typer.Option(None, "--treatment", "-t",
                                                   help="A treatment to apply to every group, one at a time (repeatable; "
                                                        "default int4_b32): int8, int4_b32, int4_b64_octav, int8_wo, fp16, …"),
    overrides: Optional[list[str]] = typer.Option(None, "--set", help="GROUP=TREATMENT: this group gets another "
                                                  "treatment in every sweep (repeatable), e.g. layer3.mlp=int2_c."),
    only: Optional[list[str]] = typer.Option(None, "--group", "-g", help="Score only this group (repeatable)."),
    positions: int = typer.Option(2048, "--positions", min=64, help="Held-out positions scored (>= 2,000 for a claim)."),
    chart: Optional[Path] = typer.Option(None, "--chart", help="Where to write the PNG chart (default: "
                                         "FARM_HOME/sensitivity/<model>.png)."),
    top: int = typer.Option(20, "--top", min=1, help="Rows shown in the terminal (--json has every row)."),
    fresh: bool = typer.Option(False, "--fresh", help="Measure again even where lineage holds this measurement."),
    source_grid: bool = typer.Option(False, "--source-grid", help="Measure on a source-grid export: every linear on a "
                                     "4-bit GGUF grid split so that int4_b32_dwr holds it exactly (docs/recipes.md)."),
    as_json: bool = json_flag("one JSON object: groups, every sweep, the sorted table and the chart's path"),
) -> None:
    """What quantizing each op group costs: from CONFIG's float export (built or cached), apply a
    treatment to every group (the embedding, the lm_head, each layer's attention and MLP, the
    family's own groups), score each group alone teacher-forced against the float model on the
    shipped held-out text (KL, top-1), record it in lineage, and print the groups sorted by KL per
    megabyte saved, worst first."""
    names = list(treatments or ["int4_b32"])

    def run() -> dict[str, Any]:
        from farm.pipeline import Job
        from farm.recipes.treatments import parse_treatments
        from farm.resources import get_resources
        from farm.tuning.chart import sensitivity_png
        from farm.tuning.sensitivity import table

        job = Job.load(config)  # bad input (config, treatments, --set) before Prefect starts
        parse_treatments(names)
        sets = _overrides(overrides)
        get_resources().toolchain.require()
        configure_prefect_env()
        from flows.common import run_flow
        from flows.tuning import sensitivity as sensitivity_flow

        report = run_flow(sensitivity_flow, str(config.resolve()), names, sets, positions, list(only or []) or None,
                          fresh, source_grid)
        path = chart or (get_settings().home / "sensitivity" / f"{report['model_id']}.png")
        path.parent.mkdir(parents=True, exist_ok=True)
        report["chart"] = str(sensitivity_png(report, path))
        report["table"] = table(report)
        return report

    report = _guard(run)
    if as_json:
        _emit(report)
        return
    _print_sensitivity(report, top)
    _log_line()


def _print_sensitivity(report: dict[str, Any], top: int) -> None:
    print(f"{report['model_id']}: float export {report['float_sha256'][:12]}, {report['positions']:,} held-out positions "
          f"({report['windows']} windows), reference NLL {report['reference']['nll']:.3f}")
    for s in report["sweeps"]:
        a = s.get("all") or {}
        check = s.get("interpreter_check") or {}
        if s.get("error") or not a:
            print(f"  {s['name']:<22} not measured: {s.get('error') or 'it applies to no group'}")
            for g, why in sorted((s.get("not_applicable") or {}).items())[:3]:
                print(f"    not applicable to {g}: {why}")
            continue
        line = (f"  {s['name']:<22} {'reused' if s['reused'] else 'measured'}: all groups KL {a.get('kl', float('nan')):.4g}, "
                f"top-1 {a.get('top1', float('nan')):.3f}")
        if s.get("measured_by") == "interpreter":
            line += (f" (static activations or a rotation: every figure through the Interpreter, {a.get('positions')} "
                     "positions)")
        elif check.get("ran"):
            line += (f"; Interpreter check on {check['positions']} positions: KL {check['kl_interpreter']:.4g} "
                     f"(simulated {check['kl_simulated']:.4g})")
        print(line)
        for g, why in sorted((s.get("not_applicable") or {}).items()):
            print(f"    not applicable to {g}: {why}")
    rows = report["table"]
    print(f"\n  {'group':<24} {'treatment':<16} {'KL':>9} {'top-1':>6} {'MB saved':>9} {'KL/MB saved':>12}")
    for r in rows[:top]:
        per = "—" if r["kl_per_mb_saved"] is None else f"{r['kl_per_mb_saved']:.3g}"
        print(f"  {r['group']:<24} {r['treatment']:<16} {r['kl']:>9.3g} {r['top1']:>6.3f} {r['saved_bytes'] / 1e6:>9.2f} "
              f"{per:>12}")
    if len(rows) > top:
        print(f"  … {len(rows) - top} more rows (--top N, or --json)")
    print(f"chart: {report['chart']}")


@app.command()
def tune(
    config: Path = typer.Argument(..., help="Build config YAML (see examples/)."),
    max_kl: float = typer.Option(0.05, "--max-kl", min=0.0, help="Mean KL against the float model on the held-out text "
                                 "(nats per position) the recipe may cost."),
    min_top1: float = typer.Option(0.85, "--min-top1", min=0.0, max=1.0, help="Agreement of the top-1 token with the "
                                   "float model on the held-out text the recipe must keep."),
    max_bytes_per_param: Optional[float] = typer.Option(None, "--max-bytes-per-param", min=0.01,
                                                        help="Weight bytes per parameter the file may take."),
    treatments: Optional[list[str]] = typer.Option(None, "--treatment", "-t", help="Treatments a group may get besides "
                                                   "float (repeatable; default int8, int4_b128, int4_b64, int4_b32)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Where to write the recipe (default "
                                       "recipes/<model>-tuned.yaml; its file name is the recipe's name)."),
    max_tries: int = typer.Option(4, "--max-tries", min=1, max=20, help="Candidates to try at most."),
    positions: int = typer.Option(2048, "--positions", min=64, help="Held-out positions scored."),
    source_grid: bool = typer.Option(False, "--source-grid", help="Search over a source-grid export (every linear on a "
                                     "4-bit GGUF grid split; add -t int4_b32_dwr to hold it exactly); the recipe "
                                     "written says source_grid: true."),
    as_json: bool = json_flag("one JSON object: status, every candidate, the frontier, the chart's path"),
) -> None:
    """Find the smallest recipe for CONFIG that keeps the model's answers: sweep the treatments over
    every op group (reused from lineage when measured), choose a treatment per group with the least
    predicted bytes under the target, measure the whole candidate, build it through every gate, and
    promote the group a failed gate implicates (bounded by --max-tries). Writes the recipe (each rule
    citing its measured figures) and records the whole search in lineage. Exits 0 when a recipe met
    the target and passed every gate, 1 otherwise (the frontier says what the target would need)."""
    names = list(treatments or [])

    def run() -> dict[str, Any]:
        from farm.errors import BadInput
        from farm.pipeline import Job
        from farm.recipes.treatments import DEFAULT_TUNE, parse_treatments
        from farm.resources import get_resources
        from farm.tuning.chart import frontier_png

        job = Job.load(config)
        parse_treatments(names or list(DEFAULT_TUNE))
        if out is not None and out.suffix not in (".yaml", ".yml"):
            raise BadInput(f"--out {str(out)!r}: a recipe is a .yaml file (its stem is the recipe's name)")
        get_resources().toolchain.require()
        configure_prefect_env()
        from flows.common import run_flow
        from flows.tuning import tune as tune_flow

        result = run_flow(tune_flow, str(config.resolve()), max_kl, min_top1, max_bytes_per_param, names or None,
                          str(out.resolve()) if out else None, max_tries, positions, source_grid)
        path = get_settings().home / "tune" / f"{result['model_id']}-search{result['search_id']}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        result["chart"] = str(frontier_png(result, path))
        return result

    result = _guard(run)
    if as_json:
        _emit(result)
    else:
        _print_tune(result)
        _log_line()
    if result["status"] != "met":
        raise typer.Exit(1)


def _print_tune(r: dict[str, Any]) -> None:
    t = r["target"]
    print(f"{r['model_id']}: target KL ≤ {t['max_kl']:g}, top-1 ≥ {t['min_top1']:g}"
          + (f", ≤ {t['max_bytes_per_param']:g} bytes/param" if t.get("max_bytes_per_param") else "")
          + f" on {t['positions']:,} held-out positions")
    for c in r["candidates"]:
        check = c.get("interpreter_check") or {}
        print(f"  try {c['try']}: {c.get('bytes_per_param') or float('nan'):.3f} bytes/param, KL {c['kl']:.4g}, "
              f"top-1 {c['top1']:.3f}" + (f" (Interpreter {check['kl_interpreter']:.4g})" if check.get("ran") else "")
              + f" — {c.get('verdict', '')}")
    uniform = [p for p in r["frontier"] if p["kind"] == "uniform"]
    if uniform:
        print("  measured, one treatment everywhere: " + "; ".join(
            f"{p['name']} {p['bytes_per_param']:.3f} B/param KL {p['kl']:.3g}"
            + (f" ({', '.join(p['float_groups'][:3])}{' …' if len(p['float_groups']) > 3 else ''} float: not applicable)"
               if p.get("float_groups") else "") for p in uniform))
    if r["status"] == "met":
        c = r["chosen"]
        print(f"met: {r['recipe']} ({c['bytes_per_param']:.3f} bytes/param, KL {c['kl']:.4g}, top-1 {c['top1']:.3f}), "
              f"bundle {c['bundle_sha256'][:12]}")
    else:
        print(f"{r['status']}: {r['reason']}", file=sys.stderr)
    print(f"frontier chart: {r['chart']}")


__all__ = ["sensitivity", "tune"]
