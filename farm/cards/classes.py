"""What a card says about CPU classes (issue 34): the same bytes answer differently on another CPU
class, so a file is verified per class, and the card tells the classes apart.

- `class_verdicts(v)`: per class a file's answer-dependent gates (`per_class`) ran on — this host's,
  CPUID-masked x86 classes, emulated arm64 classes — its label, how it was presented, the host, the
  gates and their statuses, and whether every one passed;
- `disagreements(v)`: the cases whose replies differ between classes (both replies, from the
  results' recorded `replies`);
- the CPU classes section of CARD.md, the pitfalls of card.json, and the hub tags of the classes
  verified (`verified_tags`).

Everything from lineage: a class is "verified" only by its recorded results on this file's bytes.
"""

from __future__ import annotations

from typing import Any

from farm_common.gates import GATES
from farm_common.wire import WORKS

HOW = {"native": "this host's own", "cpuid_mask": "CPUID-masked on this host", "qemu": "emulated by qemu-aarch64"}


def per_class_gates() -> set[str]:
    return {g.name for g in GATES if g.per_class}


def _current(v: dict[str, Any]) -> list[dict[str, Any]]:
    """The variant's current gate rows that name a class (measured before classes were recorded: none)."""
    return [g for g in v["gates"] if not g["stale"] and g.get("cpu_class") and g["gate"] in per_class_gates()]


def class_verdicts(v: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per CPU class with per-class gate results on this file: this host's first, then masked,
    then emulated."""
    by_class: dict[str, dict[str, Any]] = {}
    for g in _current(v):
        cpu = g.get("cpu") or {}
        c = by_class.setdefault(g["cpu_class"], {"key": g["cpu_class"], "label": cpu.get("label") or g["cpu_class"],
                                                 "how": cpu.get("how") or "native", "host": g.get("host"),
                                                 "device": g.get("device"), "gates": {}, "runtime": set()})
        c["gates"][g["gate"]] = g
        c["runtime"].add(f"{g['runtime']} {g['runtime_version']}")
    out = []
    for c in by_class.values():
        statuses = {name: g["status"] for name, g in c["gates"].items() if g["status"] != "skipped"}
        c["passed"] = bool(statuses) and all(s in WORKS for s in statuses.values())
        c["failed"] = sorted(n for n, s in statuses.items() if s not in WORKS)
        # Not measured on this class (an emulated class past its size limit): why, from the record.
        c["not_measured"] = None if statuses else _short(next(iter(c["gates"].values())))
        c["runtime"] = ", ".join(sorted(c["runtime"]))
        out.append(c)
    order = {"native": 0, "cpuid_mask": 1, "qemu": 2}
    return sorted(out, key=lambda c: (order.get(c["how"], 3), c["label"]))


def disagreements(v: dict[str, Any]) -> list[dict[str, Any]]:
    """Cases whose replies differ between classes: {gate, case, replies: [(class label, how, reply)]}."""
    out = []
    classes = class_verdicts(v)
    gates = sorted({name for c in classes for name in c["gates"]})
    for name in gates:
        per_case: dict[str, list[tuple[str, str, str]]] = {}
        for c in classes:
            g = c["gates"].get(name)
            for r in (g or {}).get("replies") or []:
                reply = r.get("error") or r.get("reply", "")
                per_case.setdefault(r["case"], []).append((c["label"], c["how"], reply))
        for case, got in per_case.items():
            if len({reply for _l, _h, reply in got}) > 1:
                out.append({"gate": name, "case": case, "replies": got})
    return out


def _q(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[:limit] + "…")


def pitfalls(facts: dict[str, Any]) -> list[str]:
    """card.json's pitfalls: each file whose classes answered differently, with both replies."""
    out = []
    for v in facts["variants"]:
        found = disagreements(v)
        if not found:
            continue
        first = found[0]
        sides = "; ".join(f"on {label} ({HOW.get(how, how)}) {_q(reply)}" for label, how, reply in first["replies"])
        failing = [c["label"] for c in class_verdicts(v) if not c["passed"]]
        out.append(f"`{v['lineage']['name']}` answers differently on different CPU classes (the same bytes; XNNPACK "
                   f"picks its kernels by instruction set): {len(found)} case(s) differ, e.g. {first['gate']} "
                   f"{_q(first['case'], 80)}: {sides}."
                   + (f" It fails on {', '.join(failing)}." if failing else " Every class still passes its gates."))
    return out


def verified_tags(facts: dict[str, Any]) -> list[str]:
    """Hub tags for the classes every current file passed on (only those: a tag is a claim)."""
    per_file = [{c["label"] for c in class_verdicts(v) if c["passed"]} for v in facts["variants"]]
    if not per_file or not all(per_file):
        return []
    common = set.intersection(*per_file)
    return sorted("cpu:" + label.lower().replace(" ", "-") for label in common)


def section(facts: dict[str, Any]) -> list[str]:
    """CARD.md's CPU classes section."""
    rows, notes = [], []
    for v in facts["variants"]:
        name = v["lineage"]["name"]
        for c in class_verdicts(v):
            gates = ", ".join(f"{n} {g['status']}" + (f" ({_short(g)})" if g["status"] not in WORKS else "")
                              for n, g in sorted(c["gates"].items()))
            verdict = ("verified" if c["passed"] else "FAILS: " + ", ".join(c["failed"]) if c["failed"]
                       else f"not measured: {c['not_measured']}")
            if c["not_measured"]:
                gates = "skipped"
            rows.append(f"| `{name}` | {c['label']} | {HOW.get(c['how'], c['how'])}, host {c['host']} | "
                        f"{verdict} | {gates} | {c['runtime']} |")
        for d in disagreements(v):
            sides = "; ".join(f"{label}: {_q(reply)}" for label, _how, reply in d["replies"])
            notes.append(f"- `{name}`, {d['gate']} {_q(d['case'], 80)}: {sides}")
    if not rows:
        return []
    lines = ["", "## CPU classes", "",
             "The gates whose answers depend on the runtime's kernels, per CPU class (XNNPACK picks its kernels "
             "from CPUID / hwcaps: the same bytes can answer differently on another CPU). A file is verified on a "
             "class only when every one of those gates passed there. x86 classes below this host's are presented by "
             "CPUID masking (native speed); arm64 classes run under qemu-aarch64 (answers only: an emulator's "
             "speed is not the class's, so they have no benchmark row).", "",
             "| File | CPU class | How, where | Verdict | Gates | Runtime |", "|---|---|---|---|---|---|", *rows]
    if notes:
        lines += ["", "Where the classes answered differently (each reply as the runtime gave it):", "", *notes[:24]]
        if len(notes) > 24:
            lines.append(f"- … and {len(notes) - 24} more (`farm lineage SHA --json`: each result's replies).")
    return lines


def _short(g: dict[str, Any]) -> str:
    text = (g.get("findings") or [""])[0] or g["status"]
    text = " ".join(text.split())
    return text if len(text) <= 160 else text[:160] + "…"


def class_label(g: dict[str, Any]) -> str:
    """A gate row's class, for a table cell: its label and how it was presented."""
    cpu = g.get("cpu") or {}
    if not cpu:
        return "not recorded"
    how = {"native": "", "cpuid_mask": " (masked)", "qemu": " (emulated)"}.get(cpu.get("how"), "")
    return f"{cpu.get('label')}{how}"
