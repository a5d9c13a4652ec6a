"""Plain-text rendering of a lineage record (pure: dict in, str out)."""

from __future__ import annotations

from typing import Any


def _short(sha: str | None, n: int = 16) -> str:
    return sha[:n] if sha else "-"


def lineage_record(res, text: str, session: Any = None) -> dict[str, Any]:
    """`farm lineage X --json` and `GET /artifacts/X`: the lineage of a sha256 or unique prefix, and
    where the bytes are now, checked cheaply (a stat against the last full hash; S3: the recorded
    checksum): lineage must not point at bytes that are gone or changed. In `session` when given
    (`farm api`'s read-only one), else in a session of its own."""
    from farm.lineage.queries.artifacts import lookup

    if session is None:
        with res.db.session() as s:
            return lineage_record(res, text, s)
    # A bundle's record carries the recipe search that chose it, if one did (its target, every candidate).
    rec = lookup(session, text)
    rec["store"] = {"url": res.store.url, "status": res.store.verify(rec["sha256"])}
    if rec["store"]["status"] == "ok":
        rec["uri"] = res.store.uri(rec["sha256"])  # where the bytes are now
    return rec


def render_lineage(rec: dict[str, Any]) -> str:
    out: list[str] = []
    add = out.append
    add(f"{rec['sha256']}  {rec['kind']}  {rec['size']:,} B")
    if rec.get("name"):
        add(f"  name       {rec['name']}")
    add(f"  stored at  {rec['uri']}")
    for loc in rec.get("locations") or []:
        if loc["uri"] != rec["uri"]:
            add(f"  also put   {loc['uri']}  ({loc['recorded_at'][:19]})")
    store = rec.get("store") or {}
    if store.get("status") and store["status"] != "ok":
        add(f"  WARNING    the recorded object is {store['status']} in {store['url']}: "
            "run `farm store verify --repair`, then build again")
    add(f"  recorded   {rec['created_at']}{'  (imported)' if rec.get('imported') else ''}"
        + (f"  on host {rec['host']}" if rec.get("host") else ""))
    if rec.get("chain"):
        add(f"  version    {rec['chain']['seq']} of {rec['chain']['chain']}")
    if rec["kind"] == "card":
        d = rec.get("details") or {}
        add(f"  card of    {d.get('model_id')}: CARD.md {_short(d.get('markdown_sha256', ''))}, chart "
            f"{_short(d.get('chart_sha256', ''))}")
        for sha in d.get("describes") or []:
            add(f"  describes  {sha}")

    src = rec.get("source")
    if src:
        where = (
            f"{src['repo_id']} @ {src['revision']}" if src["kind"] == "hf"
            else f"{src['path']}" if src["kind"] == "local"
            else f"generated ({src['spec'].get('family')}, seed {src['spec'].get('seed')}) at {src['path']}"
        )
        add("source")
        add(f"  {src['kind']:<10} {where}")
        add(f"  family     {src['family']}   source id {_short(src['id'])}"
            + (f"   recorded on host {src['host']}" if src.get("host") else ""))
        gen = src.get("generation") or {}
        if gen:
            add(f"  ends at    token ids {gen.get('eos_token_ids')} (from {gen.get('from')}): the reference stops there")
        for f in src["files"]:
            add(f"    {f['sha256'][:16]}  {f['size']:>12,}  {f['path']}")

    fe = rec.get("float_export")
    if fe:
        add("float export")
        add(f"  {fe['sha256']}  {fe['size']:,} B" + (f"  made on host {fe['host']}" if fe.get("host") else ""))
        conv = ", ".join(f"{k} {v}" for k, v in (fe.get("converter") or {}).items())
        add(f"  converter  {conv}" + ("  (its files replayed from FARM_EXPORT_CACHE)" if fe.get("export_replayed") else ""))
        cfg = fe.get("export_config") or {}
        add(
            f"  config     prefill {cfg.get('prefill_lengths')}  cache {cfg.get('cache_length')}  "
            f"options {cfg.get('options')}"
        )
        if fe.get("signatures"):
            add(f"  signatures {', '.join(fe['signatures'])}")
        grid = fe.get("source_grid")
        if grid:
            kept = grid.get("kept") or {}
            add(f"  source grid  {grid.get('split')} of {grid.get('linears')} linear layers split onto their 4-bit grid "
                f"(+{grid.get('offset_params', 0):,} offset weights)"
                + (f"; kept: {', '.join(f'{k} ({v})' for k, v in list(kept.items())[:3])}" if kept else ""))

    r = rec.get("recipe")
    if r:
        add("recipe")
        add(f"  {r['name']}  digest {_short(r['digest'])}  bytes/param {r.get('bytes_per_param')}")
        if r.get("rules"):
            for e in r["rules"]:
                read = ", ".join(f"{n} {t}" for t, n in (e.get("read_back") or {}).items()) or "none"
                blocks = f", blocks of {'/'.join(map(str, e['block_sizes']))}" if e.get("block_sizes") else ""
                acts = ", ".join(f"{t}" for t in (e.get("activation_types") or {}))
                add(f"  rule {e['name']} ({e.get('label') or '?'} on {e.get('operation', '*')}): governs "
                    f"{e['matched_ops']} ops, read back {read}{blocks}" + (f"; outputs {acts}" if acts else ""))
            if r.get("calibration"):
                c = r["calibration"]
                add(f"  calibrated on {c.get('samples')} samples of {c.get('file')} (sha256 {_short(c.get('sha256'))})")
        else:  # recorded before recipes had rules
            for e in r.get("exceptions") or []:
                add(
                    f"  float exception {e['name']}: regex {e['regex']!r} matched {e['matched_ops']} ops, "
                    f"{e['float32_ops']} kept FLOAT32"
                )
        if r.get("quantized_model"):
            qm = r["quantized_model"]
            add(f"  quantized model {qm['sha256']}  {qm['size']:,} B" + (f"  made on host {qm['host']}" if qm.get("host") else ""))
    allowed = (rec.get("details") or {}).get("allowances")
    if allowed:
        vals = ", ".join(f"{k} {v}" for k, v in sorted(allowed["values"].items())) or "the gates' defaults"
        add(f"  allowances {allowed['class']}-class: {vals} "
            f"({'declared: ' + ', '.join(allowed['declared']) if allowed['declared'] else 'class defaults'})")
    search = rec.get("tune_search")
    if search:
        tgt = search["target"]
        chosen = next((c for c in search["candidates"] if c.get("chosen")), {})
        add(f"chosen by    farm tune search #{search['id']}: target KL <= {tgt['max_kl']:g}, top-1 >= {tgt['min_top1']:g}"
            f"; try {chosen.get('try', '?')} of {len(search['candidates'])}: KL {chosen.get('kl', float('nan')):.4g}, "
            f"top-1 {chosen.get('top1', float('nan')):.3f} on {tgt['positions']:,} held-out positions")

    tok = rec.get("tokenizer")
    if tok:
        add(f"tokenizer    {tok['sha256']}" + (f"  {tok['size']:,} B" if tok.get("size") else ""))

    tc = rec.get("toolchain")
    if tc:
        add(f"toolchain    {_short(tc['id'])} (pip freeze sha256)  python {tc['python']}")
        add("  " + ", ".join(f"{k} {v}" for k, v in sorted(tc["packages"].items())))

    if rec.get("sections"):
        add("sections")
        for s in rec["sections"]:
            extra = []
            if s.get("equals_artifact"):
                extra.append(f"= {s['equals_artifact']['kind']} {s['equals_artifact']['sha256'][:12]}")
            if s.get("shared_with"):
                extra.append("also in " + ", ".join(x[:12] for x in s["shared_with"][:8])
                             + (" and more" if s.get("shared_with_more") or len(s["shared_with"]) > 8 else ""))
            add(
                f"  [{s['index']}] {s['type']:<22} @{s['offset']:<10} {s['size']:>12,} B  "
                f"{s['sha256'][:16]}  {'  '.join(extra)}".rstrip()
            )

    prev = rec.get("previous")
    if prev:
        add(f"previous file {prev['sha256']}  {prev['size']:,} B  ({prev['created_at']})")
        for d in prev["sections"]:
            add(f"  {d['type']:<22} {d['status']}")
    else:
        add("previous file  none (the first version of its chain)" if rec.get("chain") else
            "previous file  none (an import: imports join no version chain)" if rec.get("imported") else
            "previous file  -")
    for later in rec.get("superseded_by") or []:
        add(f"superseded by {later}")

    gates = rec.get("gates") or []
    if gates:
        add("gates (per runtime version and CPU class, newest result of each gate)")
        latest: dict[tuple, dict] = {}
        for g in gates:
            latest[(g["runtime"], g["runtime_version"], g["backend"], g.get("cpu_class") or "",
                    g["gate"], g["artifact_sha256"])] = g
        by_runtime: dict[tuple, list[dict]] = {}
        for (rt, ver, backend, cls, _gate, _sha), g in latest.items():
            by_runtime.setdefault((rt, ver, backend, cls), []).append(g)
        for (rt, ver, backend, _cls), rows in sorted(by_runtime.items(), key=lambda kv: (kv[0][:3], _class_order(kv[1][0]))):
            add(f"  {rt} {ver} ({backend}) {_where(rows[0])}")
            for g in rows:
                on = "" if g["artifact_sha256"] == rec["sha256"] else f"  on float export {g['artifact_sha256'][:12]}"
                recheck = f"  (re-check #{g['recheck_id']})" if g.get("recheck_id") else ""
                add(f"    {g['gate']:<20} {g['status']:<13} {g['finished_at'][:19]}{on}{recheck}")
                if g["status"] in ("warn", "could_not_run"):
                    add(f"      {(g.get('findings') or [''])[0][:300]}")
    for rc in rec.get("rechecks") or []:
        t = rc["trigger"] or {}
        add(
            f"re-check #{rc['id']}: {t.get('gate')} {t.get('status')} on {str(t.get('artifact_sha256'))[:12]} -> "
            f"{len(rc['siblings'])} sibling(s) by {rc.get('basis') or 'recipe'} {str(rc.get('basis_key') or '-')[:12]}"
        )
        for r in rc["results"]:
            add(f"    {r['artifact_sha256'][:12]} {r['gate']:<20} {r['status']}")
    devices = rec.get("devices") or []
    if devices:
        add("devices (each a measurement of this file)")
        for d in devices:
            fig = (
                f"prefill {d['prefill_tokens_per_s']:.1f} tok/s, decode {d['decode_tokens_per_s']:.1f} tok/s"
                if d.get("decode_tokens_per_s") is not None else "no figures"
            )
            extra = f", TTFT {d['ttft_ms']:.0f} ms" if d.get("ttft_ms") is not None else ""
            mem = f", peak {d['peak_mem_mb']:.0f} MB" if d.get("peak_mem_mb") is not None else ""
            why = f" ({d['failure_class']})" if d.get("failure_class") else ""
            add(
                f"  {d['device_id']:<14} {d['accelerator']:<4} {d['status']}{why}  -p {d['prefill_tokens']} -d "
                f"{d['decode_tokens']}: {fig}{extra}{mem}  {d.get('runtime') or ''} {d.get('runtime_version') or ''} "
                f"{d['finished_at'][:10]}" + (f"  [{d['cpu']['label']}, host {d.get('host')}]" if d.get("cpu") else "")
            )
    if rec.get("siblings"):
        add("siblings (same recipe) " + ", ".join(x[:12] for x in rec["siblings"]))
    return "\n".join(out)


def _class_order(g: dict) -> tuple:
    """This host's class first, then masked, then emulated classes."""
    how = (g.get("cpu") or {}).get("how") or "native"
    return ({"native": 0, "cpuid_mask": 1, "qemu": 2}.get(how, 3), g.get("device") or "")


def _where(g: dict) -> str:
    """Where a result's runtime ran: the CPU class as its process saw it, how, and the host."""
    cpu = g.get("cpu") or {}
    if not cpu:
        return "on an unrecorded CPU class (measured before classes were recorded)"
    how = {"native": "native", "cpuid_mask": "CPUID-masked", "qemu": "emulated by qemu"}.get(cpu.get("how"), cpu.get("how"))
    return f"on {cpu.get('label')} [{how}, host {g.get('host') or cpu.get('host')}, device {g.get('device')}]"

