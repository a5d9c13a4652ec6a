"""Read-only lineage queries, one module per concern; each returns plain JSON-able dicts (the CLI
prints them): artifacts (a file's whole record, the listing, recorded sources and recipes), sections,
gates (results, re-checks, siblings), devices, cards (the newest card, each version chain's head),
tuning (recipe searches, quality measurements); common holds what they share."""
