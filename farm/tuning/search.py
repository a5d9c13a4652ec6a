"""Choosing a treatment per op group: the smallest predicted bytes under a quality target, from the
per-group figures of a sensitivity sweep. Pure functions (no I/O).

The model of the search: each group's cost is what it cost measured alone (KL against the float
model on the held-out text, and top-1 disagreement), and the costs add up. They do not exactly (the
errors of two groups interact), which is why a recipe search measures every candidate it proposes
as a whole before building it (farm/tuning/tune.py) and tightens the budget when the sum was
optimistic.

A unit is what gets one treatment: a group, or groups that read one float buffer (a tied
embedding and lm_head). Quantized alike, tied groups share one quantized buffer; quantized
differently, each gets its own copy, which is never smaller than both alike at the larger
treatment (measured on SmolLM2: an int4 lm_head beside an int8 embedding wrote 136 MB, both int8
92 MB), so a unit's groups always get the same treatment.

The search is greedy: every unit starts at its smallest option; while the target is missed, the
upgrade (a unit to an option with more bytes and less cost) that buys the most of what is missing
per byte is made; then any unit whose downgrade still meets the target is moved down, most bytes
saved per cost first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Option:
    treatment: str
    kl: float
    loss: float  # top-1 disagreement, 1 - top1
    bytes: float


@dataclass
class Unit:
    name: str
    groups: list[str]
    params: int
    float_bytes: float
    options: dict[str, Option] = field(default_factory=dict)

    def ordered(self) -> list[Option]:
        """Options by bytes, then cost (smallest first)."""
        return sorted(self.options.values(), key=lambda o: (o.bytes, o.kl, o.loss))


@dataclass(frozen=True)
class Target:
    max_kl: float
    min_top1: float
    max_bytes_per_param: float | None = None

    @property
    def max_loss(self) -> float:
        return 1.0 - self.min_top1


def units_from(groups: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[Unit]:
    """Units from a sweep's groups (with `shares_weights_with`) and its table rows; each unit gets
    the float option (cost 0) and every treatment measured on all of its groups."""
    by_group: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_group.setdefault(r["group"], {})[r["treatment"]] = r
    info = {g["name"]: g for g in groups}
    seen: set[str] = set()
    units = []
    for g in groups:
        if g["name"] in seen:
            continue
        members = [g["name"], *[n for n in g.get("shares_weights_with") or [] if n in info]]
        members = sorted(set(members), key=[x["name"] for x in groups].index)
        seen.update(members)
        u = Unit(name="+".join(members), groups=members, params=sum(info[m]["params"] for m in members),
                 float_bytes=sum(info[m]["float_bytes"] for m in members))
        u.options["float"] = Option("float", 0.0, 0.0, u.float_bytes)
        common = set.intersection(*(set(by_group.get(m, {})) for m in members))
        for t in sorted(common):
            rs = [by_group[m][t] for m in members]
            u.options[t] = Option(t, sum(r["kl"] for r in rs), sum(1.0 - r["top1"] for r in rs),
                                  sum(r["bytes"] for r in rs))
        units.append(u)
    return units


def totals(units: list[Unit], choice: dict[str, str]) -> dict[str, float]:
    opts = [u.options[choice[u.name]] for u in units]
    return {"kl": sum(o.kl for o in opts), "loss": sum(o.loss for o in opts), "bytes": sum(o.bytes for o in opts)}


def solve(units: list[Unit], max_kl: float, max_loss: float, max_bytes: float | None = None,
          exclude: dict[str, set[str]] | None = None) -> dict[str, str] | None:
    """{unit: treatment} with the least predicted bytes meeting the predicted KL and disagreement
    budgets (and max_bytes, the groups' share of the byte limit), or None when no choice does."""
    exclude = exclude or {}
    allowed = {u.name: [o for o in u.ordered() if o.treatment not in exclude.get(u.name, set())] for u in units}
    if any(not opts for opts in allowed.values()):
        return None
    choice = {u.name: allowed[u.name][0].treatment for u in units}

    def over(t: dict[str, float]) -> tuple[float, float]:
        return max(0.0, t["kl"] - max_kl), max(0.0, t["loss"] - max_loss)

    while True:
        t = totals(units, choice)
        miss_kl, miss_loss = over(t)
        if miss_kl <= 1e-15 and miss_loss <= 1e-15:
            break
        best, best_gain = None, 0.0
        for u in units:
            cur = u.options[choice[u.name]]
            for o in allowed[u.name]:
                extra = o.bytes - cur.bytes
                gain = (min(cur.kl - o.kl, miss_kl) / max(max_kl, 1e-12) if miss_kl > 0 else 0.0) + \
                       (min(cur.loss - o.loss, miss_loss) / max(max_loss, 1e-12) if miss_loss > 0 else 0.0)
                if gain <= 0:
                    continue
                score = gain / max(extra, 1.0)
                if best is None or score > best_gain:
                    best, best_gain = (u.name, o.treatment), score
        if best is None:
            return None
        choice[best[0]] = best[1]
    # Move units down where the target still holds, most bytes saved per cost added first.
    improved = True
    while improved:
        improved = False
        t = totals(units, choice)
        moves = []
        for u in units:
            cur = u.options[choice[u.name]]
            for o in allowed[u.name]:
                if o.bytes >= cur.bytes:
                    continue
                kl, loss = t["kl"] - cur.kl + o.kl, t["loss"] - cur.loss + o.loss
                if kl <= max_kl and loss <= max_loss:
                    cost = (o.kl - cur.kl) / max(max_kl, 1e-12) + (o.loss - cur.loss) / max(max_loss, 1e-12)
                    moves.append(((cur.bytes - o.bytes) / max(cost, 1e-12), u.name, o.treatment))
        if moves:
            moves.sort(reverse=True)
            _s, name, tr = moves[0]
            choice[name] = tr
            improved = True
    if max_bytes is not None and totals(units, choice)["bytes"] > max_bytes:
        return None
    return choice


def least_cost_under(units: list[Unit], max_bytes: float) -> dict[str, str] | None:
    """The choice with the least predicted KL whose bytes fit max_bytes (what a too-small size
    limit can buy at best): from the smallest options, upgrades by KL bought per byte while they fit."""
    choice = {u.name: u.ordered()[0].treatment for u in units}
    if totals(units, choice)["bytes"] > max_bytes:
        return None
    while True:
        t = totals(units, choice)
        best = None
        for u in units:
            cur = u.options[choice[u.name]]
            for o in u.ordered():
                extra = o.bytes - cur.bytes
                if o.kl >= cur.kl or extra <= 0 or t["bytes"] + extra > max_bytes:
                    continue
                score = (cur.kl - o.kl) / extra
                if best is None or score > best[0]:
                    best = (score, u.name, o.treatment)
        if best is None:
            return choice
        choice[best[1]] = best[2]


def predicted_frontier(units: list[Unit], max_loss: float, budgets: list[float]) -> list[dict[str, float]]:
    """(bytes, KL) of the solution at each KL budget (disagreement held to max_loss)."""
    out = []
    for b in budgets:
        choice = solve(units, b, max_loss)
        if choice is not None:
            t = totals(units, choice)
            out.append({"kl_budget": b, "kl": t["kl"], "loss": t["loss"], "bytes": t["bytes"]})
    return out
