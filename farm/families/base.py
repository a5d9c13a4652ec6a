"""What a model family is, and the registry every family module registers with.

A family is one module (`farm/families/<family>.py`, in the spirit of llama.cpp's
convert_hf_to_gguf registry): a `Family` subclass registered with `@FAMILIES.register(name)`,
holding what the pipeline needs per architecture. A config names its family; the source's
config.json `architectures` must be one the family claims, or the build stops before converting."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from farm.errors import BadInput
from farm_common.registry import Registry


class Family:
    """Class attributes are the family's facts; a subclass may add behaviour (hooks) as methods."""

    name: str = ""
    architectures: frozenset[str] = frozenset()
    # Export options merged under the config's own (the config wins).
    export_defaults: Mapping[str, Any] = MappingProxyType({})
    # Layer names the family really has, by which a recipe's float exception is checked: an
    # exception aimed at one of these layers that matches no op is a broken regex, not a no-op.
    layers: frozenset[str] = frozenset()
    # Recurrent-state models need the executor metadata section in the bundle.
    recurrent_state: bool = False
    end_of_turn: str | None = None

    def __repr__(self) -> str:
        return f"<family {self.name}>"


def _make(name: str, cls: type[Family], attrs: dict[str, Any]) -> Family:
    if attrs or not (isinstance(cls, type) and issubclass(cls, Family)):
        raise TypeError(f"family {name}: register a Family subclass, its facts as class attributes")
    family = cls()
    family.name = name
    return family


FAMILIES: Registry[Family] = Registry("model family", "farm.families", make=_make, support=("base",),
                                      error=BadInput, plural="supported families")


def get_family(name: str) -> Family:
    return FAMILIES.get(name)


def family_architectures() -> dict[str, frozenset[str]]:
    """Every registered family and the architectures it converts (what a refusal lists)."""
    return {f.name: f.architectures for f in FAMILIES}


def family_names() -> list[str]:
    return FAMILIES.names()


def check_architecture(family: Family, architectures: list[str] | None, where: str) -> None:
    if not architectures or not set(architectures) & family.architectures:
        raise BadInput(
            f"unsupported architecture {architectures} in {where}: family {family.name!r} converts "
            f"{', '.join(sorted(family.architectures))}"
        )
