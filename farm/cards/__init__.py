"""Model cards rendered from lineage (card.json in the edge-compat format, schema 1.2, and CARD.md):
facts.py reads what lineage holds with provenance, model.py builds and validates card.json,
render.py writes CARD.md, checks.py are the mechanical checks before publication, publish.py stores
and records the card (and its chart)."""
