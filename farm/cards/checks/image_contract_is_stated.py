"""An image bundle's card states its image contract as lineage recorded it (the size the runtime
resizes to, the prompt positions an image takes) in its Image input section, and a failed
second-turn result's finding there (the seeds' stop-token defect on the embeddings path reached
their card only as a note measured on other models)."""

from __future__ import annotations

from farm.cards.checks.base import CARD_CHECKS


@CARD_CHECKS.register("image_contract_is_stated", order=27)
def image_contract_is_stated(card, facts, markdown, devices) -> list[str]:
    section = markdown.split("## Image input", 1)[-1].split("\n## ", 1)[0] if "## Image input" in markdown else ""
    out = []
    for v in facts["variants"]:
        rec = v["lineage"]
        img = (rec.get("details") or {}).get("image")
        if not img:
            continue
        for claim in (f"resized (stretched) to {img['width']}x{img['height']}",
                      f"{img.get('positions_per_image')} prompt positions per image"):
            if claim not in section:
                out.append(f"{rec['sha256'][:12]} is an image bundle but its card's Image input section does not "
                           f"say {claim!r}")
        for g in v["gates"]:
            if g["gate"] == "second_turn_parity" and not g["stale"] and g["status"] == "fail" and g.get("findings"):
                if g["findings"][0] not in section:
                    out.append(f"the second_turn_parity finding of {rec['sha256'][:12]} "
                               f"({g['findings'][0][:60]!r}…) is not in the card's Image input section")
    return out
