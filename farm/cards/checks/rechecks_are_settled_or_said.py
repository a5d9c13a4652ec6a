"""A pending or failed re-check of this file's siblings is said on the card. The seeds' apology:
files of a failed recipe not re-checked."""

from __future__ import annotations

from farm.cards.checks.base import CARD_CHECKS
from farm_common.wire import FAILING


@CARD_CHECKS.register("rechecks_are_settled_or_said", order=50)
def rechecks_are_settled_or_said(card, facts, markdown, devices) -> list[str]:
    out = []
    for v in facts["variants"]:
        for rc in v["lineage"].get("rechecks") or []:
            results = rc["results"]
            pending = len(rc["siblings"]) > len({r["artifact_sha256"] for r in results})
            bad = any(r["status"] in FAILING for r in results)
            if (pending or bad) and f"Re-check #{rc['id']}" not in markdown:
                out.append(f"re-check #{rc['id']} of this file's {rc.get('basis')} is "
                           f"{'pending' if pending else 'failed'} and the card does not say so")
    return out
