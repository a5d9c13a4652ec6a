"""Every warn finding recorded on a current file is in the card's Honest notes and its pitfalls. The
seeds' apology: a one-Engine-per-conversation warning that came two months late."""

from __future__ import annotations

from farm.cards.checks.base import CARD_CHECKS, latest_own


@CARD_CHECKS.register("warn_findings_are_printed", order=20)
def warn_findings_are_printed(card, facts, markdown, devices) -> list[str]:
    """Every warn finding recorded on a current file itself (raw rows) is in Honest notes and pitfalls."""
    notes = markdown.split("## Honest notes", 1)[-1].split("\n## ", 1)[0] if "## Honest notes" in markdown else ""
    out = []
    for v in facts["variants"]:
        for g in latest_own(v["history"][0]):
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
