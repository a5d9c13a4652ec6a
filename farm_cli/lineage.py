"""Questions lineage answers: lineage, card, artifacts, recipes, and the HTTP API."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from farm_cli._common import _emit, _guard, app, configure_prefect_env, json_flag


@app.command()
def lineage(
    sha: str = typer.Argument(..., help="A sha256 or a unique prefix (>= 4 hex digits)."),
    as_json: bool = json_flag(),
) -> None:
    """Where did this file come from? Source, float export, recipe, tokenizer, toolchain, sections."""

    def run() -> dict[str, Any]:
        from farm.lineage.report import lineage_record
        from farm.resources import get_resources

        return lineage_record(get_resources(), sha)

    rec = _guard(run)
    if as_json:
        _emit(rec)
    else:
        from farm.lineage.report import render_lineage

        print(render_lineage(rec))

@app.command()
def card(
    model: str = typer.Argument(..., help="The build config's `name` (the card's model id, lower-cased)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write card.json, CARD.md and chart.png here."),
    as_json: bool = json_flag("one JSON object (the card, and where it went)"),
    check: bool = typer.Option(False, "--check", help="Only run the mechanical checks: publish nothing, exit 1 on a failure."),
    config: Optional[Path] = typer.Option(None, "--config", "-c",
                                          help="A build config whose `card:` section (license, task, source URL) "
                                               "replaces the one recorded with the bundles."),
) -> None:
    """Render MODEL's card from lineage (card.json in the edge-compat format, schema 1.2, and CARD.md),
    check it, and publish it: stored, recorded in lineage as kind `card`, and kept as the Prefect
    markdown artifact card-<model id>. A card that fails a check is not published (exit 1, every
    failure listed)."""
    from farm.errors import CardRefused

    def run() -> dict[str, Any]:
        from farm.cards.publish import render_card
        from farm.resources import get_resources

        card_cfg = None
        if config is not None:
            from farm.config import load_config

            card_cfg = load_config(config).card.model_dump(mode="json")
        # A dry render first (cheap, no Prefect): refusals come before any publishing.
        dry = render_card(get_resources(), model, card_cfg, out_dir=None, publish=False)
        if check or dry["failures"]:
            return dry
        configure_prefect_env()
        from flows.card import card as card_flow
        from flows.common import run_flow

        return {**dry, **run_flow(card_flow, model, str(out.resolve()) if out else None, card_cfg)}

    result = _guard(run)
    failures = result["failures"]
    result["published"] = bool(result.get("card_sha256"))
    if as_json:
        _emit({k: result.get(k) for k in ("model_id", "published", "failures", "card_sha256", "files", "uris", "card",
                                        "markdown")})
    else:
        for f in failures:
            print(f"  check failed: {f}", file=sys.stderr)
        if check and not failures:
            print(f"{result['model_id']}: every check passes ({len(result['card']['artifacts'])} file(s))")
        if result.get("card_sha256"):
            print(f"{result['model_id']}: card {result['card_sha256']}")
            for f in result.get("files") or []:
                print(f"  {f}")
    if failures:
        print(f"error: {CardRefused(result['model_id'], failures)}" if not check else
              f"error: the card of {result['model_id']} fails {len(failures)} check(s)", file=sys.stderr)
        raise typer.Exit(1)

@app.command()
def publish(
    model: str = typer.Argument(..., help="The build config's `name` (the card's model id, lower-cased)."),
    to: str = typer.Option(..., "--to", help="The repository folder to write (created if missing; with --check, the "
                                             "folder to check), or hf://OWNER/REPO to upload it to the Hugging Face "
                                             "hub as one commit (token: HF_TOKEN; endpoint: HF_ENDPOINT)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With hf://: list what the commit would add, update and "
                                                          "delete; record and upload nothing."),
    check: bool = typer.Option(False, "--check", help="Only check the folder against lineage: exit 1 naming each file "
                                                      "that differs from what the card claims."),
    as_json: bool = json_flag("one JSON object (the files written, or the check's failures)"),
    config: Optional[Path] = typer.Option(None, "--config", "-c",
                                          help="A build config whose `card:` section (license, base model, task, "
                                               "source URL) replaces the one recorded with the bundles."),
) -> None:
    """Write MODEL's model repository, ready to upload: README.md (the card under Hugging Face
    metadata: license, base_model, pipeline_tag, library_name, tags), card.json and the chart, every
    current .litertlm file (its sha256 verified against lineage on the way out), litertlm_manifest.json
    (each file's sha256 and lineage record) and REPRODUCE.md with each file's build config and recipe.
    The card is published first, as `farm card` does (a card that fails a check writes nothing)."""

    def run() -> dict[str, Any]:
        from farm.resources import get_resources

        card_cfg = None
        if config is not None:
            from farm.config import load_config

            card_cfg = load_config(config).card.model_dump(mode="json")
        from farm.errors import BadInput
        from farm.publishing.hub import hub_repo
        from farm.settings import get_settings

        repo_id = hub_repo(to)
        target = to if repo_id else str(Path(to).expanduser().resolve())
        if check:
            from farm.publishing.folder import check_folder
            from farm.publishing.target import folder_of

            return check_folder(get_resources(), model, folder_of(get_settings().home, target), card_cfg)
        if dry_run and not repo_id:
            raise BadInput("--dry-run lists what an upload would change: give --to hf://OWNER/REPO")
        from farm.cards.publish import render_card

        dry = render_card(get_resources(), model, card_cfg, out_dir=None, publish=False)
        if dry["failures"]:
            return dry
        configure_prefect_env()
        from flows.card import card as card_flow
        from flows.common import run_flow

        return run_flow(card_flow, model, None, card_cfg, target, dry_run)

    result = _guard(run)
    failures = result.get("failures") or []
    repo = result.get("repository")
    if as_json:
        _emit({"model_id": result.get("model_id"), "checked": check, "failures": failures,
               **({"repository": repo} if repo else {}), **({"dir": result["dir"]} if "dir" in result else {})})
    elif check:
        for f in failures:
            print(f"  differs: {f}", file=sys.stderr)
        if not failures:
            print(f"{result['model_id']}: {result['dir']} holds exactly what lineage says (every file's sha256, the "
                  "card, the manifest, REPRODUCE.md)")
    elif repo and "repo_id" in repo:
        verb = "would" if repo["dry_run"] else ("committed" if repo["commit"] else "nothing to commit")
        print(f"{result['model_id']} → hf://{repo['repo_id']} ({verb}{': ' + repo['commit'] if repo.get('commit') else ''})")
        for kind in ("add", "update", "delete"):
            for p in repo[kind] or []:
                print(f"  {kind:<7} {p}")
        print(f"  {len(repo['unchanged'] or [])} file(s) unchanged; the folder: {repo['dir']}")
    elif repo:
        print(f"{result['model_id']}: {len(repo['files'])} file(s) in {repo['dir']}")
        for f in repo["files"]:
            print(f"  {f['sha256'][:12]}  {f['size']:>13,} B  {f['path']}")
        for f in repo["removed"]:
            print(f"  removed (no longer current): {f}")
    if failures:
        if not check:
            for f in failures:
                print(f"  check failed: {f}", file=sys.stderr)
        from farm.errors import CardRefused

        print(f"error: {result['dir']}: {len(failures)} file(s) differ from what the card claims" if check else
              f"error: {CardRefused(result['model_id'], failures)}", file=sys.stderr)
        raise typer.Exit(1)

@app.command()
def api(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8787, min=1, max=65535, help="Port to listen on."),
    workers: int = typer.Option(0, min=0, max=64,
                                help="Server processes (0: one per CPU core, at most 4). A lookup is ~4 ms of Python: "
                                     "one process serves ~250 a second."),
) -> None:
    """Serve lineage over HTTP, read-only: GET /artifacts/{sha256-or-prefix}, /artifacts?model=&recipe=&kind=,
    /sections/{sha256}, /cards/{model}; OpenAPI at /docs and /openapi.json."""

    def run() -> None:
        from farm.api import serve
        from farm.resources import get_resources

        res = get_resources()
        with res.db.session():
            pass  # reach the lineage DB (and migrate it) before listening: a bad URL is one line, not a 503 later
        n = workers or min(4, os.cpu_count() or 1)
        print(f"lineage API on http://{host}:{port} (OpenAPI: http://{host}:{port}/docs; {n} process"
              f"{'es' if n > 1 else ''})", file=sys.stderr)
        serve(res, host, port, workers=n)

    _guard(run)

@app.command()
def artifacts(
    kind: Optional[str] = typer.Option(None, help="float_tflite | quantized_tflite | litertlm | tokenizer | card | card_file"),
    limit: int = typer.Option(50, help="Newest first, at most this many (1 or more)."),
    model: Optional[str] = typer.Option(None, help="Only this model's bundles and cards (a config name / model id)."),
    recipe: Optional[str] = typer.Option(None, help="Only files made with this recipe (name or digest)."),
    as_json: bool = json_flag(),
) -> None:
    """List recorded artifacts, newest first."""

    def run() -> list[dict[str, Any]]:
        from farm.errors import BadInput
        from farm.lineage.queries.artifacts import ARTIFACT_KINDS, list_artifacts
        from farm.resources import get_resources

        if kind is not None and kind not in ARTIFACT_KINDS:
            raise BadInput(f"unknown artifact kind {kind!r}: kinds are {', '.join(ARTIFACT_KINDS)}")
        if limit < 1:
            raise BadInput(f"--limit must be 1 or more, got {limit}")
        from farm.model_ids import model_id

        with get_resources().db.session() as s:
            return list_artifacts(s, kind, limit, model=model_id(model) if model else None, recipe=recipe)

    rows = _guard(run)
    if as_json:
        _emit({"artifacts": rows})
        return
    for r in rows:
        print(f"{r['sha256'][:16]}  {r['kind']:<16} {r['size']:>12,}  {r['created_at'][:19]}  {r['name'] or ''}")

@app.command()
def recipes(as_json: bool = json_flag()) -> None:
    """List the shipped recipes (recipes/*.yaml)."""
    from farm.recipes import RECIPES_DIR, list_recipes, load_recipe

    recipes_ = _guard(lambda: [load_recipe(n, RECIPES_DIR) for n in list_recipes(RECIPES_DIR)])
    rows = [{"name": r.name, "digest": r.digest(), "description": r.description,
             "rules": [{"name": x.name, "regex": x.regex, "op": x.op, "treatment": x.label()} for x in r.all_rules()],
             "calibration": ({**r.calibration.model_dump(), "sha256": r.calibration_sha256} if r.calibration else None),
             "float_exceptions": [e.model_dump() for e in r.float_exceptions]} for r in recipes_]
    if as_json:
        _emit({"recipes": rows})
        return
    for r in rows:
        print(f"{r['name']:<28} {r['digest'][:12]}  {r['description']}")
        for x in r["rules"]:
            print(f"  {x['name']:<24} {x['treatment']:<22} on {x['op']:<18} regex {x['regex']!r}")

@app.command()
def families(
    build: bool = typer.Option(False, "--build", help="First build every family's tiny model (examples/families/) "
                                                      "at float and int8, through every stage, gate and device."),
    only: Optional[list[str]] = typer.Option(None, "--family", "-f", help="With --build: only this family "
                                                                          "(repeatable)."),
    write: Optional[Path] = typer.Option(None, "--write", metavar="FILE",
                                         help="Put the Markdown table between FILE's family-matrix markers "
                                              "(README.md)."),
    as_json: bool = json_flag("one JSON object: per family, its architectures and each column's newest outcome"),
) -> None:
    """The family matrix: every registered family × float / int8, what its tiny model's newest build
    passed or where it failed (stage, tool, version, reason), from lineage."""

    def run() -> list[dict[str, Any]]:
        from farm.family_matrix import RECIPES, matrix, matrix_configs
        from farm.families import family_names
        from farm.lineage.queries.artifacts import family_matrix
        from farm.resources import get_resources

        if only:
            unknown = sorted(set(only) - set(family_names()))
            if unknown:
                from farm.errors import BadInput

                raise BadInput(f"no family {', '.join(unknown)}: families are {', '.join(family_names())}")
        if build:
            import yaml

            for path in matrix_configs():
                src = (yaml.safe_load(path.read_text()) or {}).get("source", {})
                if only and src.get("family") not in only:
                    continue
                for recipe in RECIPES:
                    _build_one(path, recipe)
        with get_resources().db.session() as s:
            return matrix(family_matrix(s))

    entries = _guard(run)
    if as_json:
        _emit({"families": entries})
        return
    from farm.family_matrix import markdown, write_between_markers

    table = markdown(entries)
    if write is not None:
        _guard(lambda: write_between_markers(write, table))
        print(f"wrote the family matrix into {write}", file=sys.stderr)
    print(table, end="")


def _build_one(config: Path, recipe: str) -> None:
    """One matrix build in its own `farm build` process (its own log; a failure is recorded in
    lineage by the build and read back by the table): one progress line."""
    import subprocess
    import time

    from farm.progress import stderr_progress

    started = time.monotonic()
    # --measure-known-failures: the matrix measures a known failure again rather than repeating it.
    proc = subprocess.run([sys.executable, "-m", "farm_cli", "build", str(config), "--recipe", recipe,
                           "--measure-known-failures"], capture_output=True, text=True)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    what = "built" if proc.returncode == 0 else (errors[-1][7:] if errors else f"exit {proc.returncode}")
    stderr_progress(f"{config.stem} {recipe}: {what[:160]} ({time.monotonic() - started:.0f} s)")
