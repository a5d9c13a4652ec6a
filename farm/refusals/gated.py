"""A gated hub repository without a token (checked first: without a token the config, and maybe the
file list, are hidden, so any other reason would be a guess)."""

from __future__ import annotations

from farm.refusals.base import REFUSALS, SourceFacts


@REFUSALS.register("gated", order=10)
def refuse(f: SourceFacts) -> tuple[str, str] | None:
    # First: without a token a gated repository hides its config and may hide its file list, so
    # any other refusal would be a guess from what is missing (the replay test caught
    # "no safetensors weights" answering for a gated repository).
    if f.hub is None or not f.hub.get("gated") or f.has_token:
        return None
    return (f"{f.where} is gated ({f.hub['gated']} approval) and no Hugging Face token is set",
            "accept the license on the model's page, then set HF_TOKEN (or run `huggingface-cli login`)")
