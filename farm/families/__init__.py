"""Model families: what the pipeline needs to know per architecture, one module per family
(in the spirit of llama.cpp's convert_hf_to_gguf registry). A config names its family; the source's
config.json `architectures` must be one the family claims, or the build stops before converting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from farm.errors import BadInput


@dataclass(frozen=True)
class Family:
    name: str
    architectures: frozenset[str]
    # Export options merged under the config's own (the config wins).
    export_defaults: dict[str, Any] = field(default_factory=dict)
    # Layer names the family really has, by which a recipe's float exception is checked: an
    # exception aimed at one of these layers that matches no op is a broken regex, not a no-op.
    layers: frozenset[str] = frozenset()
    # Recurrent-state models need the executor metadata section in the bundle.
    recurrent_state: bool = False
    end_of_turn: str | None = None


_REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    _REGISTRY[family.name] = family
    return family


def get_family(name: str) -> Family:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise BadInput(
            f"unknown model family {name!r}: supported families are {', '.join(sorted(_REGISTRY))}"
        ) from None


def family_architectures() -> dict[str, frozenset[str]]:
    """Every registered family and the architectures it converts (what a refusal lists)."""
    return {name: f.architectures for name, f in sorted(_REGISTRY.items())}


def family_names() -> list[str]:
    return sorted(_REGISTRY)


def check_architecture(family: Family, architectures: list[str] | None, where: str) -> None:
    if not architectures or not set(architectures) & family.architectures:
        raise BadInput(
            f"unsupported architecture {architectures} in {where}: family {family.name!r} converts "
            f"{', '.join(sorted(family.architectures))}"
        )


from farm.families import gemma3, llama, qwen3_5  # noqa: E402,F401  (registers the families)
