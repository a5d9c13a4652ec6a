"""Mechanical checks before a card is published (`farm card --check`, and always before publishing).
Each failure names the claim and the measurement it lacks. The seed cards' apologies, one per check:
a phone listed as verified that never ran the file; a one-Engine-per-conversation warning two months
late; a CPU arithmetic defect nobody measured; a "fits" nobody measured; files of a failed recipe
not re-checked; TODO strings in a published card."""

from __future__ import annotations

import re
from typing import Callable

from farm.cards.render import device_limits

CHECKS: dict[str, Callable[..., list[str]]] = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _raw_runs(facts) -> dict[int, tuple[dict, dict, dict]]:
    """{device result id: (run, the file it ran on, the variant's current file)} from the raw rows."""
    out = {}
    for v in facts["variants"]:
        for h in v["history"]:
            for d in h["devices"]:
                out[d["id"]] = (d, h, v["history"][0])
    return out


@check
def verified_devices_ran_this_file(card, facts, markdown, devices) -> list[str]:
    """Re-derived from the raw device rows and section hashes, not from the carry-over flags."""
    runs = _raw_runs(facts)
    out = []
    for e in (card.get("device") or {}).get("records", []):
        run = e["run"]
        if not run["runs"]:
            continue
        m = re.search(r"device_results #(\d+)", e.get("source", ""))
        raw = runs.get(int(m.group(1))) if m else None
        claim = f"{e['device']} is listed as verified on {run['accelerator']}"
        if raw is None:
            out.append(f"{claim}, but it cites no recorded device run of this model's files")
            continue
        d, ran_on, current = raw
        if d["status"] != "verified" or d["accelerator"] != run["accelerator"] or d["device_id"] != e["device"]:
            out.append(f"{claim}, but its run #{d['id']} is {d['status']} on {d['device_id']} {d['accelerator']}")
        elif ran_on["sha256"] != current["sha256"] and (
                not ran_on["sections"].get("TFLiteModel")
                or ran_on["sections"].get("TFLiteModel") != current["sections"].get("TFLiteModel")):
            out.append(f"{claim}, but its run #{d['id']} measured {ran_on['sha256'][:12]}, whose TFLite section the "
                       f"current file {current['sha256'][:12]} does not carry: no passing run of the current file")
        if any(x["status"] == "does_not_fit" and x["device_id"] == e["device"] for x in current["devices"]):
            out.append(f"{claim} although the current file {current['sha256'][:12]} was measured not to fit it")
    return out


def _latest_own(h: dict, gate: str | None = None) -> list[dict]:
    """The newest result per (gate, runtime version) recorded on the file itself (no re-checks)."""
    latest: dict = {}
    for g in h["gates"]:
        if g.get("recheck_id") is None and g["artifact_sha256"] == h["sha256"] and gate in (None, g["gate"]):
            latest[(g["gate"], g["runtime_version"])] = g
    return list(latest.values())


@check
def warn_findings_are_printed(card, facts, markdown, devices) -> list[str]:
    """Every warn finding recorded on a current file itself (raw rows) is in Honest notes and pitfalls."""
    notes = markdown.split("## Honest notes", 1)[-1].split("\n## ", 1)[0] if "## Honest notes" in markdown else ""
    out = []
    for v in facts["variants"]:
        for g in _latest_own(v["history"][0]):
            if g["status"] != "warn":
                continue
            w = (g.get("findings") or [f"{g['gate']} warns"])[0]
            if w not in notes:
                out.append(f"the {g['gate']} warn finding {w[:80]!r}… of {g['artifact_sha256'][:12]} is not in the "
                           "card's Honest notes")
            if w not in card.get("pitfalls", []):
                out.append(f"the {g['gate']} warn finding {w[:80]!r}… of {g['artifact_sha256'][:12]} is not in the "
                           "card's pitfalls")
    return out


@check
def real_models_have_an_arithmetic_result(card, facts, markdown, devices) -> list[str]:
    """A real model's current file (or a file with its TFLite section) has a CPU arithmetic result."""
    out = []
    for v in facts["variants"]:
        current = v["history"][0]
        if ((v["lineage"].get("source") or {}).get("kind")) == "generated":
            continue  # random weights: arithmetic measures nothing
        from farm.gates import GATES

        needs = GATES.get("arithmetic").sections  # declared with the gate
        if not any(_latest_own(h, "arithmetic") for h in v["history"]
                   if h["sha256"] == current["sha256"]
                   or all(current["sections"].get(t) and h["sections"].get(t) == current["sections"].get(t) for t in needs)):
            out.append(f"{v['lineage']['name']} {current['sha256'][:12]}: no CPU arithmetic / degeneration result on "
                       f"this file or on a file carrying its {', '.join(needs)} byte for byte (enable gates.arithmetic "
                       "and build)")
    return out


@check
def device_limits_match_measurements(card, facts, markdown, devices) -> list[str]:
    out = [f"the card does not state the measured limit: {s!r}" for s in device_limits(facts, devices)
           if s not in markdown]
    for line in re.findall(r"peaked at (\d+) MB of (\d+) MB RAM", markdown):
        peak, ram = int(line[0]), int(line[1])
        if not any(d.get("peak_mem_mb") and round(d["peak_mem_mb"]) == peak and (devices.get(d["device_id"]) or {})
                   .get("ram_mb") == ram for v in facts["variants"] for d in v["devices"]):
            out.append(f"the statement 'peaked at {peak} MB of {ram} MB RAM' matches no measured run")
    return out


@check
def rechecks_are_settled_or_said(card, facts, markdown, devices) -> list[str]:
    out = []
    for v in facts["variants"]:
        for rc in v["lineage"].get("rechecks") or []:
            results = rc["results"]
            pending = len(rc["siblings"]) > len({r["artifact_sha256"] for r in results})
            bad = any(r["status"] in ("fail", "could_not_run") for r in results)
            if (pending or bad) and f"Re-check #{rc['id']}" not in markdown:
                out.append(f"re-check #{rc['id']} of this file's {rc.get('basis')} is "
                           f"{'pending' if pending else 'failed'} and the card does not say so")
    return out


_PLACEHOLDER = re.compile(r"\b(TODO|TBD|FIXME|XXX|placeholder|lorem ipsum)\b", re.IGNORECASE)


@check
def no_placeholders_or_empty_cells(card, facts, markdown, devices) -> list[str]:
    import json

    out = [f"placeholder {m.group(0)!r} in the card" for m in _PLACEHOLDER.finditer(markdown + json.dumps(card))]
    for n, line in enumerate(markdown.splitlines(), start=1):
        if line.startswith("|") and not re.fullmatch(r"\|( ?\|)+ ?|\|(-+\|)+", line.strip()):
            cells = line.strip().strip("|").split("|")
            if any(not c.strip() for c in cells):
                out.append(f"an empty table cell on line {n} (say 'not measured' instead): {line[:100]}")
    return out


def run_checks(card, facts, markdown, devices) -> list[str]:
    failures = []
    for name, fn in CHECKS.items():
        failures += [f"{name}: {f}" for f in fn(card, facts, markdown, devices)]
    return failures
