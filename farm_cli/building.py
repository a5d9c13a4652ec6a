"""Commands that make and measure files: build, gate, import, rebuild, revalidate."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from farm.settings import get_settings
from farm_cli._common import _emit, _guard, _log_line, app, configure_prefect_env, json_flag


@app.command()
def build(
    config: Optional[Path] = typer.Argument(None, help="Build config YAML (see examples/); or --hub."),
    hub: Optional[str] = typer.Option(None, "--hub", metavar="REPO[@REV]",
                                      help="Build a Hugging Face repository with no config written by hand: the "
                                           "family from its config.json, the revision pinned to the commit the hub "
                                           "answers, the config kept in FARM_HOME/configs/."),
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", help="Recipe name or YAML path (overrides the config's)."),
    as_json: bool = json_flag("one JSON object: artifact, stages, gates, devices, card; recorded: true when nothing ran"),
    no_gates: bool = typer.Option(False, "--no-gates", help="Stop after hashing; run no correctness gate."),
    no_bench: bool = typer.Option(False, "--no-bench", help="Do not benchmark on the registered devices."),
    max_minutes: Optional[float] = typer.Option(None, "--max-minutes", min=0.1,
                                                help="Stop the build with an error after this many minutes."),
    max_memory_gb: Optional[float] = typer.Option(None, "--max-memory-gb", min=0.1,
                                                  help="Stop the toolchain with an error above this resident memory "
                                                       "(default: FARM_MAX_MEMORY_GB; a source too large for it is "
                                                       "refused before any work)."),
    measure_known_failures: bool = typer.Option(
        False, "--measure-known-failures",
        help="Build even where the family's known failures say a stage fails with the installed toolchain "
             "(they refuse it before any work otherwise), and record what happens."),
) -> None:
    """Build CONFIG through every stage: source, convert, quantize, package, hash, then the gates,
    the devices and the card. Exits 1 when a gate fails (the bundle and every result are kept).
    Inputs built before whose every result is recorded are answered from lineage in about a second:
    nothing runs, and the build is listed in the Prefect UI as a run in state Cached."""
    import time

    from farm.settings import override

    # This process's settings (the toolchain client reads them): the caps of this build.
    if max_minutes is not None:
        override(build_deadline=time.time() + max_minutes * 60)
    if max_memory_gb is not None:
        override(max_memory_gb=max_memory_gb)
    if measure_known_failures:
        override(measure_known_failures=True)

    def run() -> dict[str, Any]:
        from farm.pipeline import Job
        from farm.preflight import preflight
        from farm.resources import get_resources

        nonlocal config
        if (config is None) == (hub is None):
            from farm.errors import BadInput

            raise BadInput("give a build config (CONFIG) or --hub REPO[@REV], not both")
        if hub is not None:
            from farm.hub_config import hub_config, parse_ref

            config = hub_config(get_resources(), *parse_ref(hub), recipe=recipe)
            print(f"config {config} (from the hub: family and commit)", file=sys.stderr)
        # The pipeline's checks before Prefect starts: bad input fails fast and writes nothing.
        res = get_resources()
        job = Job.load(config, recipe, res)
        preflight(res, job, gates=not no_gates)
        if (summary := _recorded(res, job, str(config.resolve()), recipe, not no_gates,
                                 not (no_bench or no_gates))) is not None:
            return summary

        configure_prefect_env(live=True)
        from flows.build import build as build_flow
        from flows.common import run_flow

        return run_flow(build_flow, str(config.resolve()), recipe, run_gates=not no_gates,
                         run_bench=not (no_bench or no_gates))

    from farm.gates.suite import FAILING

    summary = _guard(run, as_json=as_json)
    failed = [g for g in summary.get("gates", []) if g["status"] in FAILING]
    if as_json:
        _emit({k: summary[k] for k in ("artifact", "stages", "gates", "rechecks", "devices", "card") if k in summary}
              | {"recorded": bool(summary.get("recorded"))})
    else:
        # The stages, gates and devices were printed live, a line each (farm/ops/console.py); then the result.
        for g in summary.get("gates", []):
            if g["status"] == "warn":
                print(f"warn: {g['gate']}: {(g.get('findings') or [''])[0]}")
        if (c := summary.get("card")) is not None:
            print(f"card {c['model_id']} {c['card_sha256'][:12]} (`farm card {c['model_id']} --out DIR` writes it)"
                  if c["published"] else f"card not published: {c['error'][:300]}")
        if summary.get("recorded"):
            print("nothing to do: every result was already recorded for these inputs (`farm build --json` lists them)")
        a = summary["artifact"]
        print(f"{a['sha256']}  {a['size']:,} B\n  {a['uri']}")
    _log_line()
    if failed:
        # The artifact and its results are kept (a failure is data); the exit code says it failed.
        from farm.gates.suite import failure_line

        for g in failed:
            print(f"error: {failure_line(g)}", file=sys.stderr)
        raise typer.Exit(1)

def _recorded(res: Any, job: Any, config_path: str, recipe: Optional[str], run_gates: bool,
              run_bench: bool) -> dict[str, Any] | None:
    """A build whose every result is already recorded, answered from lineage (farm/recorded.py) and
    put on record as a finished `build` flow run with its summary (farm/ops/run_record.py), printed as
    the flow would print it; None when the build has work to do or its run could not be recorded
    (then the flow runs, and says why if the server is the trouble)."""
    import logging

    from farm.ops.bootstrap import prefect_api
    from farm.recorded import recorded_build

    found = recorded_build(res, job, run_gates, run_bench)
    if found is None:
        return None
    summary, events = found
    api = prefect_api(get_settings(), os.environ)
    if api is None:  # Prefect's temporary per-command server: only a flow run starts one
        return None
    from farm.ops.run_record import RunNotRecorded, record_finished_run
    from farm.summary import artifact_key, summary_markdown

    try:
        record_finished_run(
            api, os.environ, "build",
            {"config_path": config_path, "recipe": recipe, "run_gates": run_gates, "run_bench": run_bench,
             "runtime": None},
            "every stage, gate result, device result and the card were already recorded for these inputs: "
            "nothing ran (farm build read them from lineage)", tags=["farm-recorded"],
            artifact={"key": artifact_key(summary), "markdown": summary_markdown(summary),
                      "description": job.config.bundle_name(job.recipe.name)})
    except RunNotRecorded as exc:
        logging.getLogger(__name__).info("the recorded build could not be put on record (%s): running its flow", exc)
        return None
    from farm.ops.console import EVENTS, LiveLines, emit

    lines = LiveLines()
    EVENTS.addHandler(lines)
    try:
        for ev in events:
            emit(ev["kind"], ev["name"], ev["status"], ev.get("seconds"), ev.get("detail", ""))
    finally:
        EVENTS.removeHandler(lines)
        lines.close()
    return summary


@app.command()
def gate(
    sha: str = typer.Argument(..., help="A bundle's sha256 or unique prefix."),
    gates: Optional[list[str]] = typer.Option(None, "--gate", "-g", help="Run only this gate (repeatable)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Take prompts, questions and thresholds from this build config (default: the one the bundle was built with)."),
    runtime: Optional[str] = typer.Option(None, "--runtime", help="Run on this litert-lm version (a toolchain variant is installed under FARM_CACHE on first use)."),
    devices: Optional[list[str]] = typer.Option(None, "--device", "-d", help="Run on this CPU-class device of the registry only (repeatable; `farm devices` lists them; default: this host's class and every enabled class)."),
    as_json: bool = json_flag("one JSON object: sha256 and results"),
) -> None:
    """Run correctness gates on a bundle and record each result (always measures again); a failure
    re-checks its siblings on the CPU class it failed on. Every gate runs on this host's CPU class,
    and the gates whose answers depend on the runtime's kernels on every enabled class (x86 classes
    by CPUID masking, arm64 classes under qemu). Statuses: pass, warn (a declared known behaviour,
    see its finding), fail, skipped, could_not_run. Exits 1 when any gate fails or could not run."""

    def run() -> dict[str, Any]:
        from farm_common.gates import select
        from farm.lineage.queries.artifacts import resolve_sha
        from farm.pipeline import Job
        from farm.resources import get_resources

        res = get_resources(runtime)
        with res.db.session() as s:
            full = resolve_sha(s, sha)
        # The config's gate settings as a build of it judges a file: its recipe's allowances under them
        # (without, `--config` judged task_accuracy by the gate's default 2 answers, not the recipe's 20 %).
        cfg = Job.load(config).config.gates if config else None
        select(gates)  # unknown gate names fail here, before Prefect starts
        res.toolchain.require()
        from farm.devices.classes import class_targets

        class_targets(res, devices=devices)  # an unknown or unpresentable class device fails here too
        configure_prefect_env()
        from flows.common import run_flow
        from flows.gates import gate_suite
        return run_flow(gate_suite, full, gates, cfg, runtime=runtime, devices=devices)

    out = _guard(run)
    keys = ("gate", "status", "runtime", "runtime_version", "backend", "device", "host", "cpu_class", "cpu", "metrics",
            "evidence", "findings", "artifact_sha256", "request_digest")
    results = [{k: r.get(k) for k in keys} for r in out["results"]]
    if as_json:
        _emit({"sha256": out["sha256"], "results": results, "rechecks": out["rechecks"]})
    else:
        for r in results:
            print(f"  {r['gate']:<20} {r['status']:<13} {r['runtime']} {r['runtime_version']} ({r['backend']})  "
                  f"on {r['artifact_sha256'][:12]}  [{(r.get('cpu') or {}).get('label', '?')}]")
            if r["status"] == "warn":
                print(f"       {(r.get('findings') or [''])[0]}")
        for rc in out["rechecks"]:
            print(f"  re-checked {len(rc['siblings'])} sibling(s): " + ", ".join(
                f"{x['artifact_sha256'][:12]} {x['gate']} {x['status']}" for x in rc["results"]))
    from farm.gates.suite import FAILING, failure_line

    failed = [r for r in out["results"] if r["status"] in FAILING]
    if failed:
        for r in failed:
            print(f"error: {failure_line(r)}", file=sys.stderr)
        raise typer.Exit(1)

@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="A .litertlm bundle built elsewhere."),
    source: Path = typer.Option(..., "--source", help="Build config naming the source the file claims to come from."),
    as_json: bool = json_flag(),
) -> None:
    """Register a bundle the farm did not build, so gates can run on it and lineage can link it."""

    def run() -> dict[str, Any]:
        from farm.config import load_config
        from farm.errors import BadInput
        from farm.resources import get_resources
        from farm.adopt import adopt_bundle

        if not file.is_file():
            raise BadInput(f"file {str(file)!r} not found: pass the path of a .litertlm bundle")
        return adopt_bundle(get_resources(), file, load_config(source))

    out = _guard(run)
    if as_json:
        _emit(out)
    else:
        print(f"imported {out['sha256']}  {out['size']:,} B\n  {out['uri']}")
        for sec in out["sections"]:
            print(f"  {sec['type']:<22} {sec['sha256'][:16]}")

@app.command()
def rebuild(
    sha: str = typer.Argument(..., help="A farm-built bundle's sha256 or unique prefix."),
    as_json: bool = json_flag(),
) -> None:
    """Make SHA again from its recorded inputs (config, recipe, source) in a clean working area:
    MATCH (exit 0), or which sections differ and why (exit 1)."""

    def run() -> dict[str, Any]:
        from farm.lineage.queries.artifacts import lineage as q, resolve_sha
        from farm.resources import get_resources
        from farm.rebuild import recorded_inputs

        res = get_resources()
        with res.db.session() as s:
            full = resolve_sha(s, sha)
            recorded_inputs(q(s, full))  # bad input (an import, no recorded config) before any work
        res.toolchain.require()
        configure_prefect_env()
        from flows.common import run_flow
        from flows.rebuild import rebuild as rebuild_flow

        return run_flow(rebuild_flow, full)

    out = _guard(run)
    if as_json:
        _emit(out)
    else:
        print_rebuild(out)
        _log_line()
    if not out["match"]:
        raise typer.Exit(1)


def print_rebuild(out: dict[str, Any]) -> None:
    """A rebuild's verdict for the terminal: MATCH, or DIFFERS with each section that differs and why."""
    print(f"{out['verdict']}: {out['sha256']}" + ("" if out["match"] else f" rebuilt as {out['rebuilt_sha256']}"))
    for d in out["sections"]:
        if d["status"] != "identical":
            print(f"  {d['type']:<22} {d['status']}")
    for w in out["why"]:
        print(f"  because {w}")

@app.command()
def revalidate(
    runtime: Optional[str] = typer.Option(None, "--runtime", help="Re-validate on this litert-lm release "
                                          "(default: every release the index has that lineage has not measured)."),
    index_url: Optional[str] = typer.Option(None, "--index-url", help="The package index (PEP 691 JSON API; "
                                            "default FARM_INDEX_URL, else pip's)."),
    as_json: bool = json_flag("one JSON object: versions and release deltas"),
) -> None:
    """Re-run every gate and a local CPU benchmark on every published file with new litert-lm releases,
    and write each release's delta. Exits 1 when a release regresses a gate."""

    def run() -> dict[str, Any]:
        import re

        if runtime is not None and not re.fullmatch(r"\d+\.\d+\.\d+", runtime):
            from farm.errors import BadInput

            raise BadInput(f"--runtime {runtime!r} is not a release version like 0.18.1")
        configure_prefect_env()
        from flows.common import run_flow
        from flows.revalidate import revalidate as revalidate_flow

        return run_flow(revalidate_flow, runtime, index_url)

    out = _guard(run)
    if as_json:
        _emit(out)
    else:
        if not out["versions"]:
            print(f"no new litert-lm release (measured: {', '.join(out['recorded']) or 'none'})")
        for d in out["deltas"]:
            print(f"litert-lm {d['version']} vs {d['previous'] or '-'}: {len(d['gates'])} gate results on "
                  f"{len(out['files'])} file(s), {len(d['regressions'])} regression(s); delta {d['delta_sha256'][:12]}")
            for r in d["regressions"]:
                print(f"  regression: {r['name']} {r['gate']} {r['before']} -> {r['after']}")
        _log_line()
    if any(d["regressions"] for d in out["deltas"]):
        raise typer.Exit(1)
