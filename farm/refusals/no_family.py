"""An architecture no registered family covers (the families are listed)."""

from __future__ import annotations

from farm.refusals.base import REFUSALS, SourceFacts


@REFUSALS.register("no_family", order=50)
def refuse(f: SourceFacts) -> tuple[str, str] | None:
    archs = f.config.get("architectures") or []
    if any(a in covered for a in archs for covered in f.families.values()):
        return None
    listing = "; ".join(f"{name}: {', '.join(sorted(a))}" for name, a in sorted(f.families.items()))
    return (f"{f.where} is a {', '.join(archs) or 'model without config.json architectures'}, which no family "
            f"covers (families: {listing})",
            "add a family module under farm/families/ (and check litert-torch exports it)")
