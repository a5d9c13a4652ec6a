"""What a model family is, and the registry every family module registers with.

A family is one module (`farm/families/<family>.py`, in the spirit of llama.cpp's
convert_hf_to_gguf registry): a `Family` subclass registered with `@FAMILIES.register(name)`,
holding what the pipeline needs per architecture. A config names its family (or, for a local
folder, takes it from config.json: farm/config.py); the source's config.json `architectures` must be
one the family claims, or the build stops before converting, naming the family that does claim them."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from farm.errors import BadInput
from farm_common.registry import Registry
from farm_common.tiny_model import TinySpec


@dataclass(frozen=True)
class GroupPattern:
    """One kind of op group a recipe search treats as a unit (farm_toolchain/sensitivity.py): the
    weight ops of `op` type whose scope (the quantizer's get_op_scope: output tensor names, which
    litert-torch writes as the module path) matches `regex`. `(?P<layer>\\d+)` in the regex and
    `{layer}` in the name make one group per decoder layer; the group's rule regex is this one with
    the layer number written in, so it matches that layer's ops and no other layer's."""

    name: str
    op: str
    regex: str
    what: str = ""

    def request(self) -> dict[str, str]:
        return {"name": self.name, "op": self.op, "regex": self.regex}


# The groups every decoder-only family litert-torch exports has (scopes as litert-torch 0.10.0 names
# them: "...DecoderLayer_3/...Attention_self_attn/...Linear_q_proj;"); a family adds its own before
# these (most specific first: an op goes to the first pattern that matches it).
LAYER = r"DecoderLayer_(?P<layer>\d+)/"
COMMON_GROUPS: tuple[GroupPattern, ...] = (
    GroupPattern("embedding", "EMBEDDING_LOOKUP", ".*", "the token table (looked up, not multiplied)"),
    GroupPattern("lm_head", "FULLY_CONNECTED", "logits_output", "the output projection onto the vocabulary"),
    GroupPattern("layer{layer}.attention", "FULLY_CONNECTED", LAYER + r"[^/;]*_self_attn[/;]",
                 "one layer's attention projections (q, k, v, o)"),
    GroupPattern("layer{layer}.mlp", "FULLY_CONNECTED", LAYER + r"[^/;]*_mlp[/;]",
                 "one layer's MLP projections (gate, up, down)"),
)


@dataclass(frozen=True)
class KnownFailure:
    """Something that fails for this family with a given tool version, as the family matrix
    measured it (README "Families, measured"; `farm families`). A known failure of a stage
    (convert, quantize, package) refuses a build before any work while that tool version is
    installed (`farm build --measure-known-failures` builds anyway, to measure it again); a known
    failure of a gate is said beside the gate's result in the matrix."""

    where: str  # a stage (convert, quantize, package) or a gate (generation_parity, …)
    tool: str  # the package it was measured on: litert-torch, ai-edge-quantizer, litert-lm, …
    versions: frozenset[str]
    reason: str  # what fails, in the tool's words where it has any
    measured: str  # when and how it was measured

    def applies(self, installed: Mapping[str, str]) -> bool:
        return installed.get(self.tool) in self.versions


# The projections of a Llama-style decoder layer (most families keep these module names).
LLAMA_LAYERS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})


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
    # The LlmModelType the runtime must find in the bundle's LLM metadata (it picks the model's
    # prompt and token handling by it): what the package stage writes and the metadata gate checks.
    # litert-torch 0.10.0's builder writes qwen3, qwen2p5, lfm2, gemma3, gemma4 for those model
    # types and generic_model for every other.
    llm_model_type: str | None = "generic_model"
    # litert-torch exports this family's vision encoder (an image-text build: `vision:` in a config),
    # and the LlmModelType that carries an image bundle's markers and image size for the runtime.
    vision: bool = False
    image_llm_model_type: str | None = None
    # What fails for this family with given tool versions (measured; see KnownFailure).
    known_failures: tuple[KnownFailure, ...] = ()
    # The family's own op groups for sensitivity and recipe search, most specific first; the
    # common ones (embedding, lm_head, each layer's attention and MLP) follow them.
    own_groups: tuple[GroupPattern, ...] = ()
    # Its tiny test model (farm/families/tiny.py: the architecture at small width, its chat
    # format), which the source stage asks the toolchain to make for a `kind: generated` source.
    tiny: TinySpec | None = None
    # Its matrix config's export and recipe (examples/families/tiny-<family>.yaml is
    # `matrix_config()`, checked by tests/unit/farm/families/test_families.py).
    matrix_export: Mapping[str, Any] = MappingProxyType({"prefill_lengths": [8], "cache_length": 64})
    matrix_extra: Mapping[str, Any] = MappingProxyType({})

    def matrix_config(self) -> dict[str, Any]:
        """The family matrix's build config for its tiny model (seed 0, at its export, int8)."""
        return {"name": f"tiny-{self.name}", "source": {"kind": "generated", "family": self.name, "seed": 0},
                "export": dict(self.matrix_export), "recipe": "dynamic_wi8_afp32", **dict(self.matrix_extra)}

    @property
    def groups(self) -> tuple[GroupPattern, ...]:
        return tuple(self.own_groups) + COMMON_GROUPS

    def __repr__(self) -> str:
        return f"<family {self.name}>"


def _make(name: str, cls: type[Family], attrs: dict[str, Any]) -> Family:
    if attrs or not (isinstance(cls, type) and issubclass(cls, Family)):
        raise TypeError(f"family {name}: register a Family subclass, its facts as class attributes")
    family = cls()
    family.name = name
    return family


FAMILIES: Registry[Family] = Registry("model family", "farm.families", make=_make, support=("base", "tiny"),
                                      error=BadInput, plural="supported families")


def get_family(name: str) -> Family:
    return FAMILIES.get(name)


def family_architectures() -> dict[str, frozenset[str]]:
    """Every registered family and the architectures it converts (what a refusal lists)."""
    return {f.name: f.architectures for f in FAMILIES}


def family_names() -> list[str]:
    return FAMILIES.names()


def family_of(architectures: list[str] | None) -> Family | None:
    """The registered family that converts one of these architectures (config.json's), if any."""
    wanted = set(architectures or ())
    return next((f for f in FAMILIES if wanted & f.architectures), None)


def check_architecture(family: Family, architectures: list[str] | None, where: str) -> None:
    """The source's architectures must be ones `family` converts; a config that names the wrong
    family is told which family does convert them."""
    if architectures and set(architectures) & family.architectures:
        return
    other = family_of(architectures)
    if other is not None:
        raise BadInput(f"architecture {architectures} in {where} is family {other.name!r}, not {family.name!r}: "
                       f"set `family: {other.name}` in the config")
    raise BadInput(
        f"unsupported architecture {architectures} in {where}: family {family.name!r} converts "
        f"{', '.join(sorted(family.architectures))}"
    )
