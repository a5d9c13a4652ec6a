"""No safetensors weights, an index naming missing shards, or empty weight files."""

from __future__ import annotations

from farm.refusals.base import REFUSALS, WEIGHT_SUFFIXES, SourceFacts


@REFUSALS.register("no_full_weights", order=40)
def refuse(f: SourceFacts) -> tuple[str, str] | None:
    weights = [n for n in f.files if n.endswith(WEIGHT_SUFFIXES)]
    if not weights:
        bins = [n for n in f.files if n.endswith((".bin", ".pt", ".pth", ".ckpt"))]
        extra = f" (only {', '.join(sorted(bins)[:3])}: pickled weights are code the farm does not run)" if bins else ""
        return (f"{f.where} has no safetensors weights{extra}",
                "use a repository or folder with model.safetensors (or its shards and index)")
    index = next((n for n in f.files if n.endswith(".safetensors.index.json")), None)
    if index is not None and f.config.get("_index_weight_map") is not None:
        missing = sorted(set(f.config["_index_weight_map"]) - set(f.files))
        if missing:
            return (f"{f.where}: {index} names shards that are not there ({', '.join(missing[:3])})",
                    "download the whole snapshot (every shard the index names)")
    if all(f.files[n] == 0 for n in weights if f.files.get(n) is not None) and f.hub is None:
        return (f"{f.where}: its safetensors files are empty", "fetch the weights (git lfs pull?)")
    return None
