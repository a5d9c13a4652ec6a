"""A model's id: the one name a model goes by in lineage, on its card, in the API and in Prefect,
made from its config's name. Its own room because the config, the cards, the API and the CLI all
derive it and none of them owns it."""

from __future__ import annotations

import re


def model_id(name: str) -> str:
    """A model id in edge-compat's pattern (^[a-z0-9][a-z0-9._-]*$) from a config name."""
    mid = re.sub(r"[^a-z0-9._-]", "-", name.lower())
    return mid if re.match(r"^[a-z0-9]", mid) else f"m-{mid}"
