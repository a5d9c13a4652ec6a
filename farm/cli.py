"""`farm`: build bundles and ask where a sha256 came from.

Errors print one line to stderr (no traceback unless --debug): exit 2 for bad input, 1 for a failed
build. Query commands take --json and then print exactly one JSON object on stdout."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from farm.errors import FarmError
from farm.settings import get_settings

app = typer.Typer(
    help="litertlm-farm: Hugging Face checkpoints -> verified LiteRT-LM bundles, with lineage.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
toolchain_app = typer.Typer(help="The toolchain env (torch, litert-torch, quantizer, builder, runtime).")
app.add_typer(toolchain_app, name="toolchain")
db_app = typer.Typer(help="The lineage database.")
app.add_typer(db_app, name="db")
store_app = typer.Typer(help="The content-addressed artifact store.")
app.add_typer(store_app, name="store")

_state = {"debug": False}


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    _state["debug"] = debug


def _guard(fn: Callable[[], Any]) -> Any:
    """Every outcome of a command is one line: the farm's own errors say what is wrong and what to
    do; anything unexpected names what failed and where its full log is (--debug: the traceback)."""
    try:
        return fn()
    except FarmError as exc:
        if _state["debug"]:
            raise
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected failure becomes one line
        if _state["debug"]:
            raise
        log = _crash_log(exc)
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        print(f"error: unexpected {type(exc).__name__}: {first} (full log: {log}; run with --debug for the "
              "traceback)", file=sys.stderr)
        raise typer.Exit(1) from None


def _crash_log(exc: BaseException) -> str:
    """The traceback and the command line, under FARM_HOME/logs (or the temp dir when FARM_HOME is
    not writable)."""
    import tempfile
    import time
    import traceback

    text = f"farm {' '.join(sys.argv[1:])}\n\n" + "".join(traceback.format_exception(exc))
    name = f"farm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for folder in (get_settings().home / "logs", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
            return str(folder / name)
        except OSError:
            continue
    return "(no writable folder for a log)"


def _emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def configure_prefect_env() -> None:
    """Before prefect is imported: keep its state under FARM_HOME (so a fresh FARM_HOME never reuses
    another farm's Prefect records) and keep the closed network quiet. Then import it, and keep the
    tracebacks of the farm's own expected errors out of its logs (--debug keeps them)."""
    settings = get_settings()
    os.environ.setdefault("PREFECT_HOME", str(settings.prefect_home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_COLORS", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_BATCH_INTERVAL", "0.5")
    # Several farm commands starting at once on a 2-core machine start their temporary servers slowly
    # (measured: "Timed out while attempting to connect to ephemeral Prefect API server" at the 20 s
    # default with 4 concurrent builds).
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    import prefect  # noqa: F401  (configures Prefect's logging, so its handlers exist below)

    if not _state["debug"]:
        _hide_tracebacks_of_expected_errors()


def _hide_tracebacks_of_expected_errors() -> None:
    """Prefect logs a task's or flow's exception with its traceback; for the farm's own errors (bad
    input, a failed build, a store error) the one-line message is the whole story, so their log
    records are made without one (--debug keeps them). A record factory, not a handler filter:
    Prefect sets up its handlers only when the first run starts."""
    make = logging.getLogRecordFactory()
    if getattr(make, "_farm", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if record.exc_info and isinstance(record.exc_info[1], FarmError):
            record.exc_info = None
            record.exc_text = None
        return record

    factory._farm = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


@app.command()
def build(
    config: Path = typer.Argument(..., help="Build config YAML (see examples/)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", help="Recipe name or YAML path (overrides the config's)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: artifact, stages, gates."),
    no_gates: bool = typer.Option(False, "--no-gates", help="Stop after hashing; run no correctness gate."),
    no_bench: bool = typer.Option(False, "--no-bench", help="Do not benchmark on the registered devices."),
) -> None:
    """Build CONFIG through every stage: source, convert, quantize, package, hash, then the gates.
    Exits 1 when a gate fails (the bundle and every result are kept)."""

    def run() -> dict[str, Any]:
        from farm.config import load_config
        from farm.recipes import RECIPES_DIR, load_recipe
        from farm.resources import get_resources

        # Validate everything cheap before Prefect starts: bad input fails fast and writes nothing.
        cfg = load_config(config).with_recipe(recipe)
        load_recipe(cfg.recipe, RECIPES_DIR)
        from farm.families import get_family

        get_family(cfg.family)
        from farm.config import LocalSource

        if isinstance(cfg.source, LocalSource):
            from farm.stages.source import validate_folder

            validate_folder(cfg.source.path, cfg.family)
        get_resources().toolchain._require()
        get_resources().store.exists("0" * 64)  # reaches the store (S3 endpoint, bucket) before any work

        configure_prefect_env()
        from flows.build import build as build_flow
        from flows.common import run_flow

        return run_flow(build_flow, str(config.resolve()), recipe, run_gates=not no_gates,
                         run_bench=not (no_bench or no_gates))

    from farm.gates.suite import FAILING

    summary = _guard(run)
    failed = [g for g in summary.get("gates", []) if g["status"] in FAILING]
    if as_json:
        _emit({k: summary[k] for k in ("artifact", "stages", "gates", "rechecks", "devices", "card") if k in summary})
    else:
        for s in summary["stages"]:
            print(f"  {s['name']:<9} {s['status']:<7} {s['seconds']:>8.2f}s")
        for g in summary.get("gates", []):
            print(f"  gate {g['gate']:<20} {g['status']:<13} {'(recorded earlier)' if g['reused'] else ''}")
            if g["status"] == "warn":
                print(f"       {(g.get('findings') or [''])[0]}")
        for d in summary.get("devices", []):
            fig = f"decode {d['decode_tokens_per_s']:.1f} tok/s" if d.get("decode_tokens_per_s") else ""
            print(f"  device {d['device']:<18} {d['accelerator']:<4} {d['status']:<13} {d['failure_class'] or ''}{fig}")
        if (c := summary.get("card")) is not None:
            print(f"  card   {c['model_id']} {c['card_sha256'][:12]} (farm card {c['model_id']} --out DIR writes it)"
                  if c["published"] else f"  card   not published: {c['error']}")
        a = summary["artifact"]
        print(f"{a['sha256']}  {a['size']:,} B\n  {a['uri']}")
    if failed:
        # The artifact and its results are kept (a failure is data); the exit code says it failed.
        from farm.gates.suite import failure_line

        for g in failed:
            print(f"error: {failure_line(g)}", file=sys.stderr)
        raise typer.Exit(1)


@app.command()
def gate(
    sha: str = typer.Argument(..., help="A bundle's sha256 or unique prefix."),
    gates: Optional[list[str]] = typer.Option(None, "--gate", "-g", help="Run only this gate (repeatable)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Take prompts, questions and thresholds from this build config (default: the one the bundle was built with)."),
    runtime: Optional[str] = typer.Option(None, "--runtime", help="Run on this litert-lm version (a toolchain variant is installed under FARM_CACHE on first use)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: sha256 and results."),
) -> None:
    """Run correctness gates on a bundle and record each result (always measures again); a failure
    re-checks its siblings. Statuses: pass, warn (a declared known behaviour, see its finding), fail,
    skipped, could_not_run. Exits 1 when any gate fails or could not run."""

    def run() -> dict[str, Any]:
        from farm.config import load_config
        from farm.gates import select
        from farm.lineage.queries import resolve_sha
        from farm.resources import get_resources

        res = get_resources(runtime)
        with res.db.session() as s:
            full = resolve_sha(s, sha)
        cfg = load_config(config).gates if config else None
        select(gates)  # unknown gate names fail here, before Prefect starts
        res.toolchain._require()
        configure_prefect_env()
        from flows.common import run_flow
        from flows.gates import gate_suite
        return run_flow(gate_suite, full, gates, cfg, runtime=runtime)

    out = _guard(run)
    keys = ("gate", "status", "runtime", "runtime_version", "backend", "metrics", "evidence", "findings",
            "artifact_sha256", "request_digest")
    results = [{k: r.get(k) for k in keys} for r in out["results"]]
    if as_json:
        _emit({"sha256": out["sha256"], "results": results, "rechecks": out["rechecks"]})
    else:
        for r in results:
            print(f"  {r['gate']:<20} {r['status']:<13} {r['runtime']} {r['runtime_version']} ({r['backend']})  "
                  f"on {r['artifact_sha256'][:12]}")
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
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Register a bundle the farm did not build, so gates can run on it and lineage can link it."""

    def run() -> dict[str, Any]:
        from farm.config import load_config
        from farm.errors import BadInput
        from farm.resources import get_resources
        from farm.stages.adopt import adopt_bundle

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


def _bench_record(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("accelerator", "status", "runs", "prefill_tokens", "decode_tokens", "prefill_tokens_per_s",
            "decode_tokens_per_s", "ttft_ms", "init_ms", "peak_mem_mb", "delegated_ops", "total_ops",
            "full_delegation", "failure_class", "evidence", "env", "runtime", "runtime_version")
    return {"device": r.get("device_id"), **{k: r.get(k) for k in keys}}


@app.command()
def devices(as_json: bool = typer.Option(False, "--json")) -> None:
    """The device registry (infra/devices.yaml, or FARM_DEVICES_FILE) with each device's last run."""

    def run() -> list[dict[str, Any]]:
        from farm.devices import load_registry
        from farm.lineage.queries import last_device_runs
        from farm.resources import get_resources

        reg = load_registry()
        with get_resources().db.session() as s:
            last = last_device_runs(s)
        rows = []
        for d in reg.devices.values():
            lr = last.get(d.id)
            rows.append({
                "id": d.id, "name": d.name, "soc": d.soc, "ram_mb": d.ram_mb, "os": d.os,
                "accelerators": d.accelerators, "runner": d.runner.kind, "enabled": d.enabled,
                "work_pool": d.work_pool, "work_queue": d.work_queue,
                "last_run": None if lr is None else {k: lr[k] for k in (
                    "artifact_sha256", "accelerator", "status", "failure_class", "decode_tokens_per_s", "finished_at")},
            })
        return rows

    rows = _guard(run)
    if as_json:
        _emit({"devices": rows})
        return
    for r in rows:
        lr = r["last_run"]
        last = "never run" if lr is None else (
            f"last: {lr['status']}{' (' + lr['failure_class'] + ')' if lr['failure_class'] else ''} on "
            f"{lr['artifact_sha256'][:12]} {lr['finished_at'][:16]}")
        print(f"{r['id']:<16} {'on ' if r['enabled'] else 'off'} {r['runner']:<6} {','.join(r['accelerators']):<8} "
              f"{r['ram_mb'] or '?':>6} MB  {r['name']}  [{last}]")


@app.command("deploy-devices")
def deploy_devices(
    device: Optional[list[str]] = typer.Option(None, "--device", "-d", help="Only this device (repeatable); default: every enabled one."),
) -> None:
    """Register each device's bench-one deployment on its work pool/queue (concurrency 1) on the
    Prefect server at PREFECT_API_URL; then run `prefect worker start --pool POOL` on the host wired to
    the device, and `farm bench SHA --workers`."""

    def run() -> list[str]:
        from farm.devices import load_registry
        from farm.errors import BadInput

        if not os.environ.get("PREFECT_API_URL"):
            raise BadInput("deploy-devices needs a Prefect server: set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)")
        reg = load_registry()
        targets = [reg.get(d) for d in device] if device else reg.enabled()
        configure_prefect_env()
        from flows.fanout import deploy_bench_one

        return deploy_bench_one(targets)

    for name in _guard(run):
        print(name)


@app.command()
def bench(
    sha: str = typer.Argument(..., help="A bundle's sha256 or unique prefix."),
    device: Optional[list[str]] = typer.Option(None, "--device", "-d", help="Only this device (repeatable); default: every enabled one."),
    workers: bool = typer.Option(False, "--workers", help="Go through each device's Prefect work pool/queue (see deploy-devices) instead of running in this process."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Benchmark a bundle on registered devices (parallel across devices, one run at a time per device)."""

    def run() -> dict[str, Any]:
        from farm.devices import load_registry
        from farm.lineage.queries import resolve_sha
        from farm.resources import get_resources

        reg = load_registry()
        for d in device or []:
            reg.get(d)  # unknown ids fail here, before anything is looked up
        res = get_resources()
        with res.db.session() as s:
            full = resolve_sha(s, sha)
        configure_prefect_env()
        from flows.fanout import fanout

        return {"sha256": full, "records": fanout(full, device or None, via_workers=workers)}

    out = _guard(run)
    records = [_bench_record(r) for r in out["records"]]
    if as_json:
        _emit({"sha256": out["sha256"], "records": records})
    else:
        for r in records:
            fig = (f"prefill {r['prefill_tokens_per_s']:.1f} tok/s, decode {r['decode_tokens_per_s']:.1f} tok/s, "
                   f"peak {r['peak_mem_mb'] or 0:.0f} MB") if r.get("decode_tokens_per_s") else ""
            print(f"  {r['device']:<16} {r['accelerator'] or '':<4} {r['status']:<13} {r['failure_class'] or ''} {fig}")
    if any(r["status"] != "verified" for r in records):
        raise typer.Exit(1)


@app.command()
def lineage(
    sha: str = typer.Argument(..., help="A sha256 or a unique prefix (>= 4 hex digits)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
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
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (the card, and where it went)."),
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
def api(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8787, min=1, max=65535, help="Port to listen on."),
) -> None:
    """Serve lineage over HTTP, read-only: GET /artifacts/{sha256-or-prefix}, /artifacts?model=&recipe=&kind=,
    /sections/{sha256}, /cards/{model}; OpenAPI at /docs and /openapi.json."""

    def run() -> None:
        from farm.api import serve
        from farm.resources import get_resources

        res = get_resources()
        with res.db.session():
            pass  # reach the lineage DB (and migrate it) before listening: a bad URL is one line, not a 503 later
        print(f"lineage API on http://{host}:{port} (OpenAPI: http://{host}:{port}/docs)", file=sys.stderr)
        serve(res, host, port)

    _guard(run)


@app.command()
def artifacts(
    kind: Optional[str] = typer.Option(None, help="float_tflite | quantized_tflite | litertlm | tokenizer | card | card_file"),
    limit: int = typer.Option(50, help="Newest first, at most this many (1 or more)."),
    model: Optional[str] = typer.Option(None, help="Only this model's bundles and cards (a config name / model id)."),
    recipe: Optional[str] = typer.Option(None, help="Only files made with this recipe (name or digest)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List recorded artifacts, newest first."""

    def run() -> list[dict[str, Any]]:
        from farm.errors import BadInput
        from farm.lineage.queries import ARTIFACT_KINDS, list_artifacts
        from farm.resources import get_resources

        if kind is not None and kind not in ARTIFACT_KINDS:
            raise BadInput(f"unknown artifact kind {kind!r}: kinds are {', '.join(ARTIFACT_KINDS)}")
        if limit < 1:
            raise BadInput(f"--limit must be 1 or more, got {limit}")
        from farm.config import model_id

        with get_resources().db.session() as s:
            return list_artifacts(s, kind, limit, model=model_id(model) if model else None, recipe=recipe)

    rows = _guard(run)
    if as_json:
        _emit({"artifacts": rows})
        return
    for r in rows:
        print(f"{r['sha256'][:16]}  {r['kind']:<16} {r['size']:>12,}  {r['created_at'][:19]}  {r['name'] or ''}")


@app.command()
def recipes(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the shipped recipes (recipes/*.yaml)."""
    from farm.recipes import RECIPES_DIR, list_recipes

    from farm.recipes import load_recipe

    recipes_ = _guard(lambda: [load_recipe(n, RECIPES_DIR) for n in list_recipes(RECIPES_DIR)])
    rows = [{"name": r.name, "digest": r.digest(), "description": r.description,
             "float_exceptions": [e.model_dump() for e in r.float_exceptions]} for r in recipes_]
    if as_json:
        _emit({"recipes": rows})
        return
    for r in rows:
        print(f"{r['name']:<28} {r['digest'][:12]}  {r['description']}")


@toolchain_app.command("install")
def toolchain_install() -> None:
    """Create the toolchain venv under FARM_CACHE from toolchain/requirements.txt (idempotent)."""
    from farm.toolchain import Toolchain

    print(_guard(lambda: Toolchain(get_settings()).install()))


@toolchain_app.command("versions")
def toolchain_versions(as_json: bool = typer.Option(False, "--json")) -> None:
    """The toolchain env's exact versions (as recorded in lineage)."""
    from farm.toolchain import Toolchain

    v = _guard(lambda: Toolchain(get_settings()).identity)
    if as_json:
        _emit({k: v[k] for k in ("python", "packages", "freeze_sha256")})
        return
    print(f"python {v['python']}  freeze sha256 {v['freeze_sha256']}")
    for k, ver in sorted(v["packages"].items()):
        print(f"  {k:<20} {ver}")


@store_app.command("verify")
def store_verify(
    repair: bool = typer.Option(False, "--repair", help="Quarantine corrupt objects, restore source files from "
                                "their recorded folders, and drop cache rows whose output is gone."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Hash every object lineage names: ok, missing, corrupt; and list orphans (stored, not
    recorded). Exits 1 while any named object is missing or corrupt."""

    def run() -> dict[str, Any]:
        from farm.resources import get_resources
        from farm.scrub import scrub

        return scrub(get_resources(), repair=repair, progress=(lambda _l: None) if as_json else print)

    out = _guard(run)
    if as_json:
        _emit(out)
    else:
        print(f"{out['store']}: {out['objects']} objects named by lineage, {out['ok']} ok, {len(out['missing'])} missing, "
              f"{len(out['corrupt'])} corrupt; {len(out['orphaned'])} orphaned (stored, not recorded)")
        for r in out["repaired"]:
            print("  repaired: " + ", ".join(f"{k} {v}" for k, v in r.items()))
    if out["missing"] or out["corrupt"]:
        raise typer.Exit(1)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the lineage DB (FARM_DATABASE_URL) to the newest schema."""
    from farm.lineage.db import upgrade

    url = get_settings().resolved_database_url
    _guard(lambda: upgrade(url))
    print(f"lineage DB at head: {url}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
