"""The farm's own machinery: toolchain env, store, lineage DB, local Prefect server."""

from __future__ import annotations

from typing import Any

import typer

from farm_cli._common import _emit, _guard, db_app, get_settings, json_flag, server_app, store_app, toolchain_app


@toolchain_app.command("install")
def toolchain_install() -> None:
    """Create the toolchain venv under FARM_CACHE from toolchain/requirements.txt (idempotent), and
    build the CPUID shim that presents lower x86 CPU classes (gcc; skipped with a note without it)."""
    from farm.devices.runners.cpuid_mask import ensure_shim
    from farm.toolchain import Toolchain
    from farm_common.cpu_classes import NotPresentable

    def shim() -> str:
        try:
            return str(ensure_shim(get_settings().cache))
        except NotPresentable as exc:
            return f"note: x86 CPU classes cannot be presented on this host: {exc}"

    print(_guard(lambda: Toolchain(get_settings()).install()))
    print(_guard(shim))

@toolchain_app.command("versions")
def toolchain_versions(as_json: bool = json_flag()) -> None:
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
    as_json: bool = json_flag(),
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

@server_app.command("start")
def server_start(as_json: bool = json_flag()) -> None:
    """Start the farm's Prefect server (UI and API on 127.0.0.1:FARM_PREFECT_PORT) in the background."""
    from farm.ops.server import start

    out = _guard(lambda: start(get_settings()))
    _emit(out) if as_json else print(f"Prefect UI {out['ui_url']} ({'started' if out['started'] else 'already running'}, "
                                     f"pid {out['pid']}; log {out['log']})")

@server_app.command("stop")
def server_stop(as_json: bool = json_flag()) -> None:
    """Stop the farm's Prefect server."""
    from farm.ops.server import stop

    out = _guard(lambda: stop(get_settings()))
    _emit(out) if as_json else print("stopped" if out["stopped"] else "not running")

@server_app.command("status")
def server_status(as_json: bool = json_flag()) -> None:
    """Whether the farm's Prefect server is up, and where (exit 1 when it is not)."""
    from farm.ops.server import status

    out = _guard(lambda: status(get_settings()))
    if as_json:
        _emit(out)
    else:
        if out["running"]:
            print(f"running: {out['ui_url']} (pid {out['pid']}; runner pid {out['runner_pid']})")
        elif out["foreign"]:
            print(f"not running: {out['ui_url']} answers as a Prefect server this FARM_HOME did not start (another "
                  "home's, or a hand-started one): set FARM_PREFECT_PORT to a free port for this FARM_HOME")
        else:
            print(f"not running (`farm server start`, or any command that runs a flow, starts it on {out['ui_url']})")
    if not out["running"]:
        raise typer.Exit(1)

@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the lineage DB (FARM_DATABASE_URL) to the newest schema."""
    from farm.lineage.db import upgrade

    url = get_settings().resolved_database_url
    _guard(lambda: upgrade(url))
    print(f"lineage DB at head: {url}")
