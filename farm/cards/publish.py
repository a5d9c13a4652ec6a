"""Render a model's card from lineage, check it, and publish it: card.json, CARD.md and a PNG chart
(prefill and decode tok/s per device and accelerator, its caption naming the sha256 and runtime
version) stored content-addressed and recorded in lineage as an artifact of kind `card` with the
bundles it describes as inputs. A card that does not validate, or fails a mechanical check, is not
published (nor written to --out): the error lists every failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from farm.cards.checks import run_checks
from farm.cards.facts import model_facts
from farm.cards.model import build_card, validate
from farm.cards.render import render_markdown
from farm.errors import BadInput, CardRefused
from farm.lineage.record import record_stored
from farm.resources import Resources
from farm.stages.common import scratch_dir


def _devices() -> dict[str, Any]:
    from farm.devices import load_registry

    try:
        reg = load_registry()
    except BadInput:
        return {}
    return {d.id: {"name": d.name, "soc": d.soc, "os": d.os, "ram_mb": d.ram_mb} for d in reg.devices.values()}


def chart_png(card: dict[str, Any], facts: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = card["benchmarks"]
    labels = [f"{b['device']}\n{b['backend']}, -p {b['metrics']['prefill_tokens']}" for b in rows]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(rows) + 2), 3.6), dpi=100)
    if rows:
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [b["metrics"]["prefill_tok_s"] or 0 for b in rows], 0.4, label="prefill tok/s")
        ax.bar([x + 0.2 for x in xs], [b["tokens_per_s"] or 0 for b in rows], 0.4, label="decode tok/s")
        ax.set_xticks(list(xs), labels, fontsize=8)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no device measurement of the current file yet", ha="center", va="center")
        ax.set_xticks([])
    ax.set_ylabel("tokens / s")
    files = ", ".join(f"{v['lineage']['name']} {v['lineage']['sha256'][:12]}" for v in facts["variants"])
    runtimes = sorted({b.get("harness_version") or "?" for b in rows})
    ax.set_title(f"{card['model']['id']}: measured throughput", fontsize=10)
    fig.text(0.01, 0.01, f"{files} · litert-lm {', '.join(runtimes) or '-'}", fontsize=7)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def compose(facts: dict[str, Any], card_cfg: dict[str, Any], devices: dict[str, Any]) -> tuple[dict, str, list[str]]:
    """(card.json, CARD.md, check failures) from lineage facts: pure, no I/O. Raises CardRefused
    when card.json does not validate against edge-compat's schema."""
    card = build_card(facts, card_cfg, devices)
    validate(card)
    markdown = render_markdown(card, facts, devices)
    return card, markdown, run_checks(card, facts, markdown, devices)


def render_card(res: Resources, model: str, card_cfg: dict[str, Any] | None = None, out_dir: Path | None = None,
                publish: bool = True,
                devices: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"model_id", "card", "markdown", "failures", "files", "card_sha256"?}. Raises CardRefused when
    the card does not validate, or a check fails unless this is a dry check (publish False and no
    out_dir), which returns the failures."""
    facts, card, markdown, failures = compose_current(res, model, card_cfg, devices)
    out = {"model_id": card["model"]["id"], "card": card, "markdown": markdown, "failures": failures, "files": []}
    if failures and (publish or out_dir is not None):
        raise CardRefused(card["model"]["id"], failures)
    if not (publish or out_dir is not None):
        return out
    body = card_json(card)
    # The recipe search that chose a current file: its frontier chart is drawn each time.
    search = _search(facts)
    if publish and out_dir is None and search is None and (same := _published_as(res, out["model_id"], body)):
        return {**out, **same}
    with scratch_dir(res, "card") as work:
        files = {"card.json": work / "card.json", "CARD.md": work / "CARD.md", "chart.png": work / "chart.png"}
        files["card.json"].write_bytes(body)
        files["CARD.md"].write_text(markdown)
        chart_png(card, facts, files["chart.png"])
        if search is not None:
            from farm.tuning.chart import frontier_png

            files["frontier.png"] = frontier_png(search, work / "frontier.png")
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, path in files.items():
                (out_dir / name).write_bytes(path.read_bytes())
                out["files"].append(str(out_dir / name))
        if publish:
            refs = {name: res.store.put_file(path) for name, path in files.items()}
            with res.db.session() as s:
                for name in [n for n in files if n != "card.json"]:
                    record_stored(s, refs[name], "card_file", model_id=card["model"]["id"],
                                  details={"model_id": card["model"]["id"], "file": name})
                ref = refs["card.json"]
                # The same bytes as a recorded card (nothing it says changed) are that card, not a
                # new version: a no-op build published a new card each time it re-benchmarked.
                out["new"] = record_stored(
                    s, ref, "card",
                    name=f"{card['model']['id']}.card.json", chain=f"card/{card['model']['id']}",
                    model_id=card["model"]["id"],
                    # Roles are short (artifact_inputs.role is 32 characters): the bundles by position,
                    # their names in `describes`.
                    inputs={f"bundle{i}": v["lineage"]["sha256"] for i, v in enumerate(facts["variants"])}
                    | {"markdown": refs["CARD.md"].sha256, "chart": refs["chart.png"].sha256}
                    | ({"frontier": refs["frontier.png"].sha256} if "frontier.png" in refs else {}),
                    details={"model_id": card["model"]["id"], "markdown_sha256": refs["CARD.md"].sha256,
                             "chart_sha256": refs["chart.png"].sha256,
                             "describes": [v["lineage"]["sha256"] for v in facts["variants"]]},
                )
            out["card_sha256"] = ref.sha256
            out["uris"] = {name: r.uri for name, r in refs.items()}
    return out


def unchanged_card(res: Resources, model: str, card_cfg: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What publishing the model's card now would return when it would not change (the same
    card.json bytes as its newest published card, every file in the store, no recipe search whose
    chart is redrawn), rendering and storing nothing; None when publishing would do something (a new
    card, a refused one: then the build runs its flow, which says so). For farm/recorded.py."""
    try:
        facts, card, _markdown, failures = compose_current(res, model, card_cfg)
    except CardRefused:
        return None
    if failures or _search(facts) is not None:
        return None
    same = _published_as(res, card["model"]["id"], card_json(card))
    return None if same is None else {"model_id": card["model"]["id"], **same}


def compose_current(res: Resources, model: str, card_cfg: dict[str, Any] | None,
              devices: dict[str, Any] | None = None) -> tuple[dict, dict, str, list[str]]:
    """(facts, card.json, CARD.md, failures) of the model's card as lineage has it now, under the
    config's card settings over the ones recorded with the bundle."""
    facts = model_facts(res, model)
    settings = card_settings(facts, card_cfg)
    return (facts, *compose(facts, settings, _devices() if devices is None else devices))


def card_settings(facts: dict[str, Any], card_cfg: dict[str, Any] | None) -> dict[str, Any]:
    """The card settings in force: the config's `card:` over the ones recorded with the bundles."""
    recorded = (facts["variants"][0]["lineage"].get("details") or {}).get("card") or {}
    return {**recorded, **{k: v for k, v in (card_cfg or {}).items() if v is not None}}


def card_json(card: dict[str, Any]) -> bytes:
    return (json.dumps(card, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _search(facts: dict[str, Any]) -> Any:
    return next((v["search"] for v in facts["variants"] if v.get("search")), None)


def _published_as(res: Resources, model_id: str, body: bytes) -> dict[str, Any] | None:
    """{"new": False, "card_sha256", "uris"} when these card.json bytes are the model's newest
    published card and its files are all in the store: nothing to draw or store (a no-op build
    spent 0.8 s drawing the chart, 0.57 s of it importing pyplot, to find the card unchanged)."""
    import hashlib

    from farm.lineage.queries.cards import latest_card

    sha = hashlib.sha256(body).hexdigest()
    with res.db.session() as s:
        head = latest_card(s, model_id)
    if head is None or head["sha256"] != sha:
        return None
    d = head["details"] or {}
    named = {"card.json": sha, "CARD.md": d.get("markdown_sha256"), "chart.png": d.get("chart_sha256")}
    if any(x is None or res.store.verify(x) != "ok" for x in named.values()):
        return None  # a file is missing or damaged: publish again, which stores it
    return {"new": False, "card_sha256": sha, "uris": {name: res.store.uri(x) for name, x in named.items()}}


__all__ = ["card_json", "card_settings", "compose_current", "render_card", "unchanged_card"]
