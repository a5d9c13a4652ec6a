"""Devices: the registry, benchmarks, and the deployments that reach them."""

from __future__ import annotations

import os
from typing import Any, Optional

import typer

from farm_cli._common import _emit, _guard, app, configure_prefect_env, json_flag


def _bench_record(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("accelerator", "status", "runs", "prefill_tokens", "decode_tokens", "prefill_tokens_per_s",
            "decode_tokens_per_s", "ttft_ms", "init_ms", "peak_mem_mb", "delegated_ops", "total_ops",
            "full_delegation", "failure_class", "evidence", "env", "runtime", "runtime_version", "host", "cpu_class",
            "cpu")
    return {"device": r.get("device_id"), **{k: r.get(k) for k in keys}}

@app.command()
def devices(
    classes: bool = typer.Option(False, "--classes", help="Also present every enabled CPU class once (an arm64 "
                                 "root is made on first use) and show the class each one's runtime saw, or why "
                                 "this host leaves it out."),
    as_json: bool = json_flag(),
) -> None:
    """The device registry (infra/devices.yaml, or FARM_DEVICES_FILE) with each device's last run.
    CPU-class devices (runner local, cpuid_mask, qemu_arm64) are where gates run: `--classes` shows
    the class each presents on this host."""

    def run() -> list[dict[str, Any]]:
        from farm.devices import load_registry
        from farm.lineage.queries.devices import last_device_runs
        from farm.resources import get_resources

        reg = load_registry()
        res = get_resources()
        with res.db.session() as s:
            last = last_device_runs(s)
        seen: dict[str, dict[str, Any]] = {}
        if classes:
            from farm.devices.classes import class_targets

            found = class_targets(res, reg)
            seen = {t.device.id: {"presented": True, "cpu": t.view.to_dict()} for t in found.presented}
            seen |= {d.id: {"presented": False, "why": why} for d, why in found.left_out}
        rows = []
        for d in reg.devices.values():
            lr = last.get(d.id)
            rows.append({
                "id": d.id, "name": d.name, "soc": d.soc, "ram_mb": d.ram_mb, "os": d.os,
                "accelerators": d.accelerators, "runner": d.runner.kind, "enabled": d.enabled,
                "cpu_class": getattr(d.runner, "cpu_class", None), "host": d.host, "work_pool": d.work_pool,
                "work_queue": d.work_queue,
                **({"class": seen[d.id]} if d.id in seen else {}),
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
        print(f"{r['id']:<17} {'on ' if r['enabled'] else 'off'} {r['runner']:<10} {','.join(r['accelerators']):<8} "
              f"{r['ram_mb'] or '?':>6} MB  {r['name']}{'  (host ' + r['host'] + ')' if r['host'] else ''}  [{last}]")
        c = r.get("class")
        if c is not None:
            print(f"{'':<21}class: {c['cpu']['label']} ({c['cpu']['how']}, host {c['cpu']['host']})" if c["presented"]
                  else f"{'':<21}left out on this host: {c['why']}")

@app.command()
def deploy(
    pool: str = typer.Option("build-pool", help="The work pool the build worker pulls from (created if missing)."),
) -> None:
    """Register every deployment (build, rebuild, gates, bench, card, recheck-siblings, revalidate on
    its hourly schedule) on a work pool of the Prefect server PREFECT_API_URL names."""

    def run() -> list[str]:
        from farm.errors import BadInput

        if not os.environ.get("PREFECT_API_URL"):
            raise BadInput("farm deploy registers deployments on a Prefect server: set PREFECT_API_URL "
                           "(locally, `farm server start` serves them instead)")
        configure_prefect_env(live=False)
        from flows.deployments import deploy_all

        return deploy_all(pool)

    for name in _guard(run):
        print(name)

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
        from farm.devices.classes import measures_speed

        reg = load_registry()
        targets = [reg.get(d) for d in device] if device else [d for d in reg.enabled() if measures_speed(d)]
        configure_prefect_env()
        from farm.settings import get_settings
        from flows.fanout import deploy_bench_one

        return deploy_bench_one(targets, get_settings().zombie_after_s)

    for name in _guard(run):
        print(name)

@app.command()
def bench(
    sha: str = typer.Argument(..., help="A bundle's sha256 or unique prefix."),
    device: Optional[list[str]] = typer.Option(None, "--device", "-d", help="Only this device (repeatable); default: every enabled one."),
    workers: bool = typer.Option(False, "--workers", help="Go through each device's Prefect work pool/queue (see deploy-devices) instead of running in this process."),
    as_json: bool = json_flag(),
) -> None:
    """Benchmark a bundle on registered devices (parallel across devices, one run at a time per device)."""

    def run() -> dict[str, Any]:
        from farm.devices import load_registry
        from farm.lineage.queries.artifacts import resolve_sha
        from farm.resources import get_resources

        from farm.devices.classes import measures_speed
        from farm.errors import BadInput

        reg = load_registry()
        for d in device or []:  # unknown ids fail here, before anything is looked up
            if not measures_speed(reg.get(d)):
                raise BadInput(f"device {d} is an emulated CPU class: it reports answers (farm gate SHA --device {d}), "
                               "never speed or memory")
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
            on = f"  [host {r['host']}]" if r.get("host") else ""
            print(f"  {r['device']:<16} {r['accelerator'] or '':<4} {r['status']:<13} {r['failure_class'] or ''} {fig}{on}")
            if r["failure_class"] == "host_down":
                print(f"    {(r.get('evidence') or [''])[0]}")
    if any(r["status"] != "verified" for r in records):
        raise typer.Exit(1)
