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
                          fresh)
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
        line = (f"  {s['name']:<22} {'reused' if s['reused'] else 'measured'}: all groups KL {a.get('kl', float('nan')):.4g}, "
                f"top-1 {a.get('top1', float('nan')):.3f}")
        if check.get("ran"):
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


__all__ = ["sensitivity"]
