"""CARD.md: edge-compat's rendering of card.json, then the farm's own sections — Correctness (every
gate result, with the file, CPU class, runtime and date it was measured on), CPU classes (each
class's verdict and where classes answered differently: farm/cards/classes.py), Changes (from section diffs),
Honest notes (every warn finding, device limits, declared allowances, re-checks, stale rows) and
Usage. Every sentence names the sha256 it is true of."""

from __future__ import annotations

from typing import Any

from farm.cards.classes import class_label, class_verdicts
from farm.cards.classes import section as cpu_section
from farm.cards.runtimes import section as runtime_section
from farm_common.gates import GATES
from farm_common.gates.registry import card_text
from farm.lineage.queries.sections import section_diff
from farm_common.wire import FAILING

_NAMES = {"TFLiteModel": "TFLite section", "HF_Tokenizer_Zlib": "tokenizer section",
          "LlmMetadataProto": "LLM metadata", "ExecutorMetadataProto": "executor metadata"}


def _sha(sha: str) -> str:
    return f"`{sha[:12]}`"


def measured_on(row: dict[str, Any]) -> str:
    when = row["measured_on_created"][:10]
    if row["basis"] == "this file":
        return f"this file, {when}"
    if row["basis"] == "this file's float export":
        return f"its float export {_sha(row['artifact_sha256'])}, {when}"
    if row["basis"] == "identical sections":
        secs = ", ".join(_NAMES.get(s, s) for s in row.get("sections", []))
        return f"the {when} file {_sha(row['measured_on'])}, whose {secs} this file carries byte for byte"
    return f"the {when} file {_sha(row['measured_on'])}: STALE ({', '.join(_NAMES.get(c, c) for c in row['changed'])} changed)"


def _gate_summary(g: dict[str, Any]) -> str:
    return (g.get("findings") or [""])[0] or ", ".join(f"{k} {v}" for k, v in list((g.get("metrics") or {}).items())[:4])


def correctness(facts: dict[str, Any]) -> list[str]:
    lines = ["", "## Correctness", "",
             "Every gate result on each current file (CPU backend). A result measured on an earlier file stands "
             "only when this file carries the sections the gate depends on byte for byte; otherwise it is marked "
             "stale.", "",
             "| File | Gate | CPU class | Status | Measured on | Runtime | Summary |", "|---|---|---|---|---|---|---|"]
    how = {"native": 0, "cpuid_mask": 1, "qemu": 2}
    for v in facts["variants"]:
        name = v["lineage"]["name"]
        order = {n: i for i, n in enumerate(GATES.names())}
        for g in sorted(v["gates"], key=lambda r: (order.get(r["gate"], 99), r["runtime_version"],
                                                   how.get((r.get("cpu") or {}).get("how"), 3), class_label(r))):
            status = "stale" if g["stale"] else g["status"]
            lines.append(f"| `{name}` | {g['gate']} | {class_label(g)} | {status} | {measured_on(g)} | {g['runtime']} "
                         f"{g['runtime_version']} | {card_text(_gate_summary(g))} |")
    return lines


def quality(facts: dict[str, Any]) -> list[str]:
    """The tables the gates declare for this section (task_accuracy: task accuracy beside the float
    model's own score, the seeds' GSM8K table), and what each file's recipe is allowed to cost (its
    declared allowances, or its class's defaults, and why)."""
    tables = []
    for spec in GATES:
        if spec.card_section != "quality" or spec.card_table is None:
            continue
        rows = []
        for v in facts["variants"]:
            for g in v["gates"]:
                if g["gate"] != spec.name or g["stale"] or not g.get("metrics"):
                    continue
                cells = spec.card_table.row(g)
                if cells is not None:
                    rows.append(f"| `{v['lineage']['name']}` | " + " | ".join(cells) + f" | {g['status']} | "
                                f"{measured_on(g)}, {class_label(g)}, {g['runtime']} {g['runtime_version']} |")
        if rows:
            columns = ("File", *spec.card_table.columns, "Status", "Measured on")
            tables += [spec.card_table.lead, "", "| " + " | ".join(columns) + " |",
                       "|" + "---|" * len(columns), *rows, ""]
    allowed = []
    for v in facts["variants"]:
        a = (v["lineage"].get("details") or {}).get("allowances")
        if a:
            vals = ", ".join(f"{k} {val}" for k, val in sorted(a["values"].items()))
            who = "declared by the recipe" if a["declared"] else f"the farm's {a['class']} defaults"
            allowed.append(f"- `{v['lineage']['name']}` ({a['class']}-class recipe): {vals or 'the gates own defaults'}, "
                           f"{who}. Why: {card_text(a['basis'], 600)}")
    grids = []
    for v in facts["variants"]:
        fe = v["lineage"].get("float_export") or {}
        g = fe.get("source_grid")
        if g:
            grids.append(f"- `{v['lineage']['name']}` holds the source's own 4-bit grid: {g['split']} of {g['linears']} "
                         f"linear layers of its float export {_sha(fe['sha256'])} were split onto their GGUF block grid "
                         f"(a symmetric int4 part and float16 per-block offsets), so each weight keeps the source's "
                         f"integer; the quantizer stores each block's step at bf16 precision (at most 2^-8 of a weight).")
    if not tables and not allowed and not grids:
        return []
    lines = ["", "## Quality", "", *tables]
    if allowed:
        lines += ["What each file's bytes are allowed to cost (the gates judge them by these; nothing excuses a "
                  "reply that loops or runs past its end of turn where the float model ends):", "", *allowed]
    if grids:
        lines += ["", *grids]
    return lines


def recipe_search(facts: dict[str, Any]) -> list[str]:
    """The farm tune search that chose a current file: every candidate it tried and the frontier."""
    lines = []
    for v in facts["variants"]:
        s = v.get("search")
        if not s:
            continue
        t = s["target"]
        lines += ["", "## Recipe search", "",
                  f"`{v['lineage']['name']}` was chosen by `farm tune` (search #{s['id']}, {s['finished_at'][:10] if s.get('finished_at') else '?'}): "
                  f"target KL ≤ {t['max_kl']:g} and top-1 ≥ {t['min_top1']:g} against the float model on "
                  f"{t['positions']:,} held-out positions (text `{t['text_sha256'][:12]}`)"
                  + (f", at most {t['max_bytes_per_param']:g} weight bytes per parameter" if t.get("max_bytes_per_param") else "")
                  + f". Float export `{s['float_sha256'][:12]}`; every candidate measured whole, then built through every gate.", "",
                  "| Try | Bytes/param | KL | Top-1 | Interpreter KL | Gates | Verdict |", "|---|---|---|---|---|---|---|"]
        for c in s["candidates"]:
            check = c.get("interpreter_check") or {}
            ikl = f"{check['kl_interpreter']:.3g} ({check['positions']} pos.)" if check.get("ran") else "—"
            bpp = f"{c['bytes_per_param']:.3f}" if c.get("bytes_per_param") is not None else "—"
            lines.append(f"| {c['try']}{' (chosen)' if c.get('chosen') else ''} | {bpp} | {c['kl']:.3g} | {c['top1']:.3f} | "
                         f"{ikl} | {c.get('gates') or 'not built'} | {card_text(c.get('verdict', ''), 220)} |")
        lines += _uniform(s)
    unmet = facts.get("unmet_searches") or []
    if unmet:
        lines += ["", "## Targets no recipe met", "",
                  "`farm tune` searches of this model that ended without a recipe, with the frontier they measured "
                  "(a size limit no measured treatment mix reaches at the quality asked):", ""]
        for s in unmet:
            t = s["target"]
            lines.append(f"- search #{s['id']} ({(s.get('finished_at') or '?')[:10]}), float export {_sha(s['float_sha256'])}: "
                         f"KL ≤ {t['max_kl']:g}, top-1 ≥ {t['min_top1']:g}"
                         + (f", ≤ {t['max_bytes_per_param']:g} weight bytes per parameter" if t.get("max_bytes_per_param") else "")
                         + f": {card_text(s.get('reason') or 'not met', 700)}")
            lines += [f"  {line}" for line in _uniform(s, chart=False)[1:]]
    return lines


def _uniform(s: dict[str, Any], chart: bool = True) -> list[str]:
    """A search's measured points with one treatment on every group, as a sentence."""
    uniform = [p for p in s.get("frontier") or [] if p.get("kind") == "uniform"]
    if not uniform:
        return []
    return ["", "One treatment on every group, as measured: " + "; ".join(
        f"{p['name']} {p['bytes_per_param']:.3f} B/param, KL {p['kl']:.3g}, top-1 {p['top1']:.3f}"
        + (f" ({', '.join(p['float_groups'])} float: the treatment does not apply)" if p.get("float_groups") else "")
        for p in uniform) + (". The size / quality frontier is drawn in frontier.png." if chart else ".")]


_INPUTS = (("source", "source"), ("template", "chat template"), ("tokenizer", "tokenizer"), ("recipe", "recipe"),
           ("export_options", "export options"), ("export", "float export"), ("metadata", "packaging metadata"),
           ("toolchain", "converter versions"))


def _input_value(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if key == "toolchain":
        return ", ".join(f"{k} {v}" for k, v in value.items() if v)
    if key == "template":
        return ", ".join(f"{p} {_sha(sha)}" for p, sha in value.items())
    if key in ("export_options", "metadata"):
        return card_text(", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "defaults", 160)
    return _sha(str(value))


def input_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Which recorded inputs differ between two files, each with both values."""
    out = []
    for key, label in _INPUTS:
        if old.get(key) != new.get(key):
            if key == "recipe":
                out.append(f"recipe {old.get('recipe_name')} {_input_value(key, old.get(key))} → "
                           f"{new.get('recipe_name')} {_input_value(key, new.get(key))}")
            else:
                out.append(f"{label} {_input_value(key, old.get(key))} → {_input_value(key, new.get(key))}")
    return out


def changes(facts: dict[str, Any]) -> list[str]:
    """Each current file's chain, newest first, in the seeds' form: the date, which sections were
    replaced and which are byte-identical, and which recorded inputs changed (from lineage, never
    typed)."""
    lines = ["", "## Changes", ""]
    for v in facts["variants"]:
        name, hist = v["lineage"]["name"], v["history"]
        for new, old in zip(hist, hist[1:]):
            groups: dict[str, list[str]] = {"replaced": [], "added": [], "removed": [], "byte-identical": []}
            kinds = {"changed": "replaced", "added": "added", "removed": "removed", "identical": "byte-identical"}
            # Matched by type and order (a file may carry several sections of one type).
            for d in section_diff(old["section_rows"], new["section_rows"]):
                groups[kinds[d["status"]]].append(_NAMES.get(d["type"], d["type"]))
            parts = [f"{', '.join(ts)} {kind}" for kind, ts in groups.items() if ts]
            inputs = input_changes(old.get("inputs") or {}, new.get("inputs") or {})
            why = (f" Inputs changed: {'; '.join(inputs)}." if inputs
                   else " No recorded input changed (source, template, tokenizer, recipe, export, converter versions).")
            lines.append(f"- {new['created_at'][:10]}: `{name}` {_sha(old['sha256'])} ({old['size']:,} B, "
                         f"{old['created_at'][:10]}) → {_sha(new['sha256'])} ({new['size']:,} B, "
                         f"{new['created_at'][:10]}): {'; '.join(parts)}.{why}")
        first = hist[-1]
        if first.get("first"):
            lines.append(f"- {first['created_at'][:10]}: `{name}` {_sha(first['sha256'])} ({first['size']:,} B): "
                         "the first file of this variant.")
    return lines


def _declared(g: dict[str, Any]) -> list[str]:
    """Settings of a gate result that differ from the gate's defaults (allowances a reader must see)."""
    spec = GATES.load().get(g["gate"])
    if spec is None:
        return []
    defaults = spec.params().model_dump() if not spec.optional else {}
    out = []
    for k, v in (g.get("config") or {}).items():
        if k in defaults and defaults[k] != v and not isinstance(v, (list, dict)):
            # A declared text (a known difference) is printed with the finding; name it only.
            out.append(f"{k} declared" if defaults[k] is None and isinstance(v, str) else f"{k} {v} (default {defaults[k]})")
    return out


def device_limits(facts: dict[str, Any], devices: dict[str, Any]) -> list[str]:
    """A sentence per measured memory fact: a device a file does not fit, and each verified peak vs RAM."""
    out = []
    for v in facts["variants"]:
        for d in v["devices"]:
            if d["stale"]:
                continue
            ram = (devices.get(d["device_id"]) or {}).get("ram_mb")
            if d["status"] == "does_not_fit":
                need = (d.get("env") or {}).get("estimated_need_mb")
                out.append(f"`{v['lineage']['name']}` does not fit {d['device_id']} ({ram} MB RAM): it needs about "
                           f"{need} MB ({(d.get('env') or {}).get('basis')}).")
            elif d["status"] == "verified" and d.get("peak_mem_mb") and ram:
                out.append(f"On {d['device_id']} ({d['accelerator']}) `{v['lineage']['name']}` peaked at "
                           f"{d['peak_mem_mb']:.0f} MB of {ram} MB RAM ({100 * d['peak_mem_mb'] / ram:.1f} %).")
    return out


def recheck_lines(facts: dict[str, Any]) -> list[str]:
    out = []
    for v in facts["variants"]:
        for rc in v["lineage"].get("rechecks") or []:
            t = rc.get("trigger") or {}
            statuses = [r["status"] for r in rc["results"]]
            pending = len(rc["siblings"]) > len({r["artifact_sha256"] for r in rc["results"]})
            bad = [r for r in rc["results"] if r["status"] in FAILING]
            if bad or pending or t.get("artifact_sha256") == v["lineage"]["sha256"]:
                out.append(f"Re-check #{rc['id']} ({rc.get('basis')}): {t.get('gate')} {t.get('status')} on "
                           f"{_sha(str(t.get('artifact_sha256')))} re-checked {len(rc['siblings'])} sibling(s): "
                           f"{statuses.count('pass')} pass, {len(bad)} fail or could not run"
                           + (", some still pending" if pending else "") + ".")
    return out


def fix_lines(facts: dict[str, Any]) -> list[str]:
    """What the package stage fixed in the builder's metadata of each file (lineage's record of it)."""
    return [f"`{v['lineage']['name']}`: the farm fixed its metadata when packaging it: {fix}."
            for v in facts["variants"] for fix in (v["lineage"].get("details") or {}).get("fixes") or []]


def honest_notes(facts: dict[str, Any], devices: dict[str, Any]) -> list[str]:
    from farm.cards.model import warn_findings

    notes = [*warn_findings(facts), *device_limits(facts, devices), *recheck_lines(facts), *fix_lines(facts)]
    for v in facts["variants"]:
        for g in v["gates"]:
            if not g["stale"] and (declared := _declared(g)):
                notes.append(f"`{v['lineage']['name']}`: {g['gate']} ran with {', '.join(declared)}, declared in "
                             "the build config.")
            if g["stale"]:
                said = (f" It said ({g['status']}): {(g.get('findings') or [''])[0]}"
                        if g["status"] not in ("pass", "skipped") and g.get("findings") else "")
                notes.append(f"`{v['lineage']['name']}`: the {g['gate']} result is stale: it was measured on "
                             f"{_sha(g['measured_on'])} and its {', '.join(_NAMES.get(c, c) for c in g['changed'])} "
                             f"changed since; not re-measured on this file.{said}")
    lines = ["", "## Honest notes", ""]
    lines += [f"- {n}" for n in notes] or ["- Nothing beyond the tables: no warning, device limit or re-check is recorded."]
    return lines


# An image bundle's TFLiteModel sections in the order the package stage writes them.
IMAGE_TFLITE_ROLES = ("decoder", "embedder", "vision encoder", "vision adapter")


def _named_sections(rows: list[dict[str, Any]], image: bool) -> list[tuple[str, dict[str, Any]]]:
    """(a reader's name, row) per section: an image bundle's TFLiteModel sections by their role."""
    out, k = [], 0
    for r in rows:
        name = r["type"]
        if r["type"] == "TFLiteModel":
            name = f"TFLiteModel ({IMAGE_TFLITE_ROLES[k] if image and k < len(IMAGE_TFLITE_ROLES) else 'decoder'})"
            k += 1
        out.append((name, r))
    return out


def _current_gate(v: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((g for g in v["gates"] if g["gate"] == name and not g["stale"]), None)


def gate_lines(v: dict[str, Any], section: str) -> list[str]:
    """The lines the gates that declare this card section write for one file, in the gates' order,
    each from the file's current result (farm_common/gates/<gate>.py `card_line`): the renderer
    names no gate, a new gate brings its own line."""
    out = []
    for spec in GATES:
        if spec.card_section != section or spec.card_line is None:
            continue
        result = _current_gate(v, spec.name)
        line = spec.card_line(result, measured_on(result) if result else "")
        if line:
            out.append(line)
    return out


def image_input(facts: dict[str, Any]) -> list[str]:
    """An image bundle's contract, its encoder's figures, its image turns, what differs from the
    text build of the same source (section by section) and the second-turn result, all from lineage."""
    lines: list[str] = []
    for v in facts["variants"]:
        rec = v["lineage"]
        d = rec.get("details") or {}
        img = d.get("image")
        if not img:
            continue
        if not lines:
            lines = ["", "## Image input", ""]
        norm = ("the processor's normalization (x - mean) / std, mean "
                f"{img.get('mean')}, std {img.get('std')}, is the encoder graph's first op: litert-lm hands the "
                "encoder pixels / 255" if img.get("normalize_in_graph") else
                "the encoder takes litert-lm's pixels / 255 as they come (no normalization in its graph)")
        lines += [f"`{rec['name']}` ({_sha(rec['sha256'])}):", "",
                  f"- Image contract: {img.get('images_per_turn', 1)} image per turn (the tested number), resized "
                  f"(stretched) to {img['width']}x{img['height']} by the runtime; {img.get('patches')} patches, "
                  f"{img.get('soft_tokens')} soft tokens, {img.get('positions_per_image')} prompt positions per "
                  f"image (the soft tokens and the end-of-image embedding); {norm}.",
                  f"- Vision encoder and adapter recipe: {d.get('vision_recipe') or 'not recorded'}; the decoder "
                  f"and the embedder: {(rec.get('recipe') or {}).get('name')}."]
        lines += gate_lines(v, "image_input")
        twin = v.get("text_twin")
        if twin:
            theirs = {n: r["sha256"] for n, r in _named_sections(twin["sections"], False)}
            same = [n for n, r in _named_sections(rec["sections"], True) if theirs.get(n) == r["sha256"]]
            differ = [n for n, r in _named_sections(rec["sections"], True) if n in theirs and theirs[n] != r["sha256"]]
            extra = [n for n, _r in _named_sections(rec["sections"], True) if n not in theirs]
            lines.append(f"- Against the text build `{twin['name']}` ({_sha(twin['sha256'])}), same source and recipe: "
                         f"byte-identical {', '.join(same) or 'none'}; different {', '.join(differ) or 'none'} (the "
                         f"decoder takes embeddings instead of token ids; the metadata names the image type and "
                         f"size); only here: {', '.join(extra) or 'none'}.")
        else:
            lines.append("- No text build of the same source and recipe is on record to compare sections with.")
        lines += ["", "```sh", f"litert-lm run {rec['name']} --backend cpu --vision-backend cpu \\",
                  "  --attachment photo.png --prompt \"What is in this image?\" </dev/null", "```"]
    return lines


def usage(facts: dict[str, Any]) -> list[str]:
    lines = ["", "## Usage", ""]
    for v in facts["variants"]:
        rec = v["lineage"]
        meta = (rec.get("details") or {}).get("metadata") or {}
        verified = sorted({f"{d['accelerator']} on {d['device_id']}"
                           + (f" [{d['cpu']['label']}, host {d.get('host')}]" if d.get("cpu") else "")
                           + f" (litert-lm {d.get('runtime_version')})"
                           for d in v["devices"] if d["status"] == "verified" and not d["stale"]})
        classes = [c["label"] for c in class_verdicts(v) if c["passed"]]
        lines += [f"`{rec['name']}` ({_sha(rec['sha256'])}):", "", "```sh",
                  f"litert-lm run {rec['name']} --backend cpu --prompt \"Hello\" </dev/null", "```", "",
                  f"- Backends benchmarked: {', '.join(verified) if verified else 'none measured yet'}.",
                  f"- Answers verified on CPU classes: "
                  + (f"{', '.join(classes)} (the CPU classes section)." if classes else "none recorded."),
                  f"- Prefill signatures: {', '.join(f'prefill_{n}' for n in meta.get('prefill_lengths') or []) or 'not recorded'}; "
                  f"KV cache: {meta.get('cache_length', 'not recorded')} tokens.",
                  *gate_lines(v, "usage"), ""]
    return lines


def render_markdown(card: dict[str, Any], facts: dict[str, Any], devices: dict[str, Any]) -> str:
    from litert_compat.cards.render import render_card_markdown

    text = render_card_markdown(card).rstrip("\n")
    body = "\n".join([*correctness(facts), *cpu_section(facts), *image_input(facts), *runtime_section(facts), *quality(facts), *recipe_search(facts), *changes(facts),
                      *honest_notes(facts, devices), *usage(facts)]).strip("\n")
    # The farm's sections go above edge-compat's closing footer, which stays last.
    head, sep, footer = text.rpartition("\n---\n")
    if not sep or "_Rendered by" not in footer:
        head, footer = text, ""
    return head.rstrip("\n") + "\n\n" + body + "\n" + (f"\n---\n{footer}\n" if footer else "")
