"""The charts of a sensitivity sweep and of a recipe search (PNG, matplotlib's Agg backend): what each
group costs per treatment, and the size / quality frontier with the chosen point. Each caption
names the float export and the held-out text the figures were measured on."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def sensitivity_png(report: dict[str, Any], path: Path) -> Path:
    """Per treatment, each group's KL against the float reference (log scale), groups in model
    order (embedding, layers, lm_head)."""
    plt = _pyplot()
    order = [g["name"] for g in report["groups"]]
    sweeps = [s for s in report["sweeps"] if s.get("scores")]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.16 * len(order) + 3), 4.2), dpi=100)
    width = 0.8 / max(1, len(sweeps))
    for k, s in enumerate(sweeps):
        kl = {r["group"]: max(r["kl"], 1e-9) for r in s["scores"]}
        xs = [i + (k - (len(sweeps) - 1) / 2) * width for i, name in enumerate(order) if name in kl]
        ax.bar(xs, [kl[n] for n in order if n in kl], width, label=f"{s['name']} (all groups: KL {s['all']['kl']:.3g})"
               if s.get("all") else s["name"])
    ax.set_yscale("log")
    ax.set_ylabel("KL vs float (nats / position)")
    ax.set_xticks(range(len(order)), order, rotation=90, fontsize=6)
    ax.legend(fontsize=7)
    ax.set_title(f"{report['model_id']}: what quantizing one group costs", fontsize=10)
    fig.text(0.01, 0.01, f"float export {report['float_sha256'][:12]} · {report['positions']} held-out positions "
             f"(text {report['text']['sha256'][:12]})", fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path


def frontier_png(search: dict[str, Any], path: Path) -> Path:
    """Bytes per parameter against KL on the held-out text: the predicted frontier (from the
    per-group figures), each measured point (the uniform treatments and every candidate tried), the
    target, and the chosen recipe."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    pred = [p for p in search.get("frontier", []) if p.get("kind") == "predicted"]
    if pred:
        ax.plot([p["bytes_per_param"] for p in pred], [max(p["kl"], 1e-6) for p in pred], "-", color="0.6",
                label="predicted from per-group figures")
    uni = [p for p in search.get("frontier", []) if p.get("kind") == "uniform"]
    for p in uni:
        ax.scatter(p["bytes_per_param"], max(p["kl"], 1e-6), marker="s", color="tab:blue")
        ax.annotate(p["name"], (p["bytes_per_param"], max(p["kl"], 1e-6)), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    for c in search.get("candidates", []):
        if c.get("kl") is None or c.get("bytes_per_param") is None:
            continue
        passed = c.get("gates") == "pass"
        ax.scatter(c["bytes_per_param"], max(c["kl"], 1e-6), marker="o",
                   color="tab:green" if passed else "tab:red" if c.get("gates") == "fail" else "tab:orange")
        ax.annotate(f"try {c['try']}", (c["bytes_per_param"], max(c["kl"], 1e-6)), fontsize=7, xytext=(3, -9),
                    textcoords="offset points")
    chosen = next((c for c in search.get("candidates", []) if c.get("chosen")), None)
    if chosen is not None:
        ax.scatter(chosen["bytes_per_param"], max(chosen["kl"], 1e-6), s=160, facecolors="none", edgecolors="black",
                   label=f"chosen: {chosen['bytes_per_param']:.3f} B/param, KL {chosen['kl']:.3g}")
    target = search.get("target") or {}
    if target.get("max_kl"):
        ax.axhline(target["max_kl"], color="tab:red", linestyle=":", label=f"target KL ≤ {target['max_kl']:g}")
    if target.get("max_bytes_per_param"):
        ax.axvline(target["max_bytes_per_param"], color="tab:purple", linestyle=":",
                   label=f"≤ {target['max_bytes_per_param']:g} B/param")
    ax.set_yscale("log")
    ax.set_xlabel("weight bytes per parameter")
    ax.set_ylabel("KL vs float (nats / position)")
    ax.set_title(f"{search['model_id']}: size / quality frontier ({search['status']})", fontsize=10)
    ax.legend(fontsize=7)
    fig.text(0.01, 0.01, f"float export {search['float_sha256'][:12]} · green: every gate passed, red: a gate "
             "failed, orange: not built", fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path
