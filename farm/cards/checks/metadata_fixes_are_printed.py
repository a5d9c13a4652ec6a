"""Every fix the package stage made to a current file's metadata (lineage's `fixes`: an end-of-turn
stop token added, a whitespace stop token dropped, a model type replaced) is in the card's Honest
notes. The seeds replaced a chat template by hand and said so; a fix nobody reads is a file that
differs from what its builder would have made, unexplained."""

from __future__ import annotations

from farm.cards.checks.base import CARD_CHECKS


@CARD_CHECKS.register("metadata_fixes_are_printed", order=25)
def metadata_fixes_are_printed(card, facts, markdown, devices) -> list[str]:
    notes = markdown.split("## Honest notes", 1)[-1].split("\n## ", 1)[0] if "## Honest notes" in markdown else ""
    out = []
    for v in facts["variants"]:
        rec = v["lineage"]
        for fix in (rec.get("details") or {}).get("fixes") or []:
            if fix not in notes:
                out.append(f"the package stage's fix {fix[:80]!r}… of {rec['sha256'][:12]} is not in the card's "
                           "Honest notes")
    return out
