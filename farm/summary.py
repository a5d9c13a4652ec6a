"""How a build's report reads (the flow's return value, `farm build --json`, the run's markdown
artifact) once its gates, devices and card are added to the pipeline's summary (farm/pipeline.py
`build_summary`), in one place for both ways a build ends: the build flow (flows/build.py) and a
build whose every result was already recorded (farm/recorded.py)."""

from __future__ import annotations

from typing import Any


def gate_row(r: dict[str, Any]) -> dict[str, Any]:
    cpu = r.get("cpu") or {}
    return {"gate": r["gate"], "status": r["status"], "reused": bool(r.get("reused")),
            "device": r.get("device"), "host": r.get("host"), "cpu_class": r.get("cpu_class"),
            "cpu_label": cpu.get("label"), "cpu_how": cpu.get("how"),
            "artifact_sha256": r["artifact_sha256"], "runtime_version": r["runtime_version"],
            "metrics": r["metrics"], "findings": r.get("findings", []), "evidence": r.get("evidence", [])}


def device_row(r: dict[str, Any]) -> dict[str, Any]:
    return {"device": r.get("device_id"), "accelerator": r.get("accelerator"), "status": r.get("status"),
            "failure_class": r.get("failure_class"), "decode_tokens_per_s": r.get("decode_tokens_per_s"),
            "prefill_tokens_per_s": r.get("prefill_tokens_per_s"), "peak_mem_mb": r.get("peak_mem_mb")}


def artifact_key(summary: dict[str, Any]) -> str:
    """The key of the build's markdown artifact in Prefect (lower-case letters, digits, dashes)."""
    return f"build-{summary['config']}".lower().replace("_", "-").replace(".", "-")


def summary_markdown(summary: dict[str, Any]) -> str:
    a = summary["artifact"]
    rows = "\n".join(f"| {s['name']} | {s['status']} | {s['seconds']:.2f} |" for s in summary["stages"])
    gates = "\n".join(
        f"| {g['gate']} | {g.get('cpu_label') or '?'} | {g['status']}{' (recorded earlier)' if g.get('reused') else ''} | "
        f"litert-lm {g['runtime_version']} | `{g['artifact_sha256'][:12]}` |"
        for g in summary.get("gates", [])
    )
    return (
        f"# {summary['config']} · {summary['recipe']}\n\n"
        f"sha256 `{a['sha256']}` · {a['size']:,} B · `{a['uri']}`\n\n"
        f"| stage | status | seconds |\n|---|---|---|\n{rows}\n"
        + (f"\n| gate | CPU class | status | runtime | measured on |\n|---|---|---|---|---|\n{gates}\n" if gates else "")
    )


def device_event(device_id: str, r: dict[str, Any], seconds: float | None = None) -> dict[str, Any]:
    """The terminal's line for one device result (farm/ops/console.py), measured or reused."""
    fig = f"decode {r['decode_tokens_per_s']:.1f} tok/s" if r.get("decode_tokens_per_s") else (r.get("failure_class") or "")
    if r.get("reused"):
        fig = f"{r.get('status')}, recorded {str(r.get('finished_at', ''))[:19]}" + (f": {fig}" if fig else "")
    return {"kind": "device", "name": f"{device_id} {r.get('accelerator')}",
            "status": "reused" if r.get("reused") else (r.get("status") or "?"), "seconds": seconds, "detail": fig}
