"""The export settings of a build: what shapes its float model (the convert stage's request and
cache key; the too-large refusal's prediction reads its options)."""

from __future__ import annotations

from farm.config import BuildConfig
from farm.families import get_family


def export_config(cfg: BuildConfig) -> dict:
    """The export settings that shape the float model: family defaults under the config's options."""
    family = get_family(cfg.family)
    exp = {
        "prefill_lengths": cfg.export.prefill_lengths,
        "cache_length": cfg.export.cache_length,
        "options": {**family.export_defaults, **cfg.export.options},
    }
    if cfg.export.source_grid:  # absent otherwise: every earlier export keeps its cache key
        exp["source_grid"] = True
    if cfg.vision is not None:  # likewise: the decoder takes embeddings, and the parts come with it
        exp["vision"] = True
    return exp
