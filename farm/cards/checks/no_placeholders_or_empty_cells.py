"""No TODO / TBD / placeholder text and no empty table cell in a published card."""

from __future__ import annotations

import re

from farm.cards.checks.base import CARD_CHECKS


_PLACEHOLDER = re.compile(r"\b(TODO|TBD|FIXME|XXX|placeholder|lorem ipsum)\b", re.IGNORECASE)


@CARD_CHECKS.register("no_placeholders_or_empty_cells", order=60)
def no_placeholders_or_empty_cells(card, facts, markdown, devices) -> list[str]:
    import json

    out = [f"placeholder {m.group(0)!r} in the card" for m in _PLACEHOLDER.finditer(markdown + json.dumps(card))]
    for n, line in enumerate(markdown.splitlines(), start=1):
        if line.startswith("|") and not re.fullmatch(r"\|( ?\|)+ ?|\|(-+\|)+", line.strip()):
            cells = line.strip().strip("|").split("|")
            if any(not c.strip() for c in cells):
                out.append(f"an empty table cell on line {n} (say 'not measured' instead): {line[:100]}")
    return out
