"""The correctness gates, one registered unit per gate.

A gate is one module here and one in farm_toolchain/gates/, joined by its name:

- here (`farm/gates/<gate>.py`): its spec — name, kind, version, target, the pydantic model of its
  inputs and thresholds with their defaults, the bundle sections its measurement depends on — and its
  request builder, registered with `@register(...)` (the way llama.cpp's convert_hf_to_gguf.py
  registers a class per architecture);
- there (`farm_toolchain/gates/<gate>.py`): the measurement, registered under the same name.

    class Params(GateParams):
        max_tokens: int = Field(16, ge=1)

    @register("generation_parity", kind="parity", version=2, params=Params, sections=(...))
    def request(ctx: SuiteContext, p: Params) -> GateRequest | None: ...

The builder names the files it needs by role (`bundle`, `float_export`, `tokenizer`, `reference`:
the recorded source folder) and gives every other value in `args`; the suite (farm/gates/suite.py)
digests (args + the identity of every role) into the result's reuse key, and materializes the
roles' local, verified paths only for gates that really run. `tests/test_gate_registry.py` fails
when a gate lacks either half.

Kinds group gates for sibling re-checks: when a gate fails, the siblings re-run every gate of its kind.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, ConfigDict

from farm.errors import BadInput

if TYPE_CHECKING:
    from farm.gates.suite import SuiteContext

ROLES = ("bundle", "float_export", "tokenizer", "reference")


class GateParams(BaseModel):
    """A gate's settings in the build config (`gates.<gate>: {...}`): unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(GateParams):
    """A gate with no settings: any key given for it is bad input."""


@dataclass(frozen=True)
class GateRequest:
    """What the toolchain measurement gets: `inputs` maps a request key to a role of the suite's
    context (its local path is filled in only when the gate runs); `args` is every other value."""

    inputs: dict[str, str]
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [r for r in self.inputs.values() if r not in ROLES]
        if bad:
            raise ValueError(f"unknown input role {bad[0]!r}: roles are {', '.join(ROLES)}")


Builder = Callable[["SuiteContext", Any], "GateRequest | None"]


@dataclass(frozen=True)
class GateSpec:
    name: str
    kind: str  # parity | quality | tokenizer | robustness | metadata
    version: int  # bump when the measurement or its pass rule changes: old results are not reused
    params: type[GateParams]
    build: Builder
    # "bundle": the result describes the .litertlm; "float": the float export it was made from.
    target: str = "bundle"
    # Optional gates (real models only) run only when the build config has a section for them.
    optional: bool = False
    # The bundle sections the measurement depends on: a result carries over to another file only
    # when that file has these sections byte for byte (model cards).
    sections: tuple[str, ...] = ()
    description: str = ""


_REGISTRY: dict[str, GateSpec] = {}


def register(name: str, *, kind: str, version: int, params: type[GateParams] = NoParams, target: str = "bundle",
             optional: bool = False, sections: tuple[str, ...] = (), description: str = "") -> Callable[[Builder], Builder]:
    """Register a gate's spec with its request builder (the decorated function)."""
    if target not in ("bundle", "float"):
        raise ValueError(f"gate {name}: target must be 'bundle' or 'float'")

    def decorate(build: Builder) -> Builder:
        if name in _REGISTRY:
            raise RuntimeError(f"gate {name!r} is registered twice")
        _REGISTRY[name] = GateSpec(name, kind, version, params, build, target, optional, sections, description)
        return build

    return decorate


# The order gates run in (cheap structural checks first would hide nothing: every gate runs).
_MODULES = ("logits_parity", "generation_parity", "questions", "arithmetic", "tokenizer_parity",
            "chat_template", "prompt_lengths", "multi_turn", "state_isolation", "metadata")
for _m in _MODULES:
    importlib.import_module(f"farm.gates.{_m}")

GATES: tuple[GateSpec, ...] = tuple(_REGISTRY.values())
BY_NAME: dict[str, GateSpec] = dict(_REGISTRY)


def gate_names() -> list[str]:
    return [g.name for g in GATES]


def select(names: list[str] | None, skip: list[str] = (), enabled: Callable[[str], bool] = lambda _n: False) -> list[GateSpec]:
    """The gates to run: the named ones (any name unknown is bad input), or every one that applies:
    not skipped, and optional ones only when `enabled` says the config asks for them."""
    if names:
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            raise BadInput(f"unknown gate {unknown[0]!r}: gates are {', '.join(BY_NAME)}")
        return [BY_NAME[n] for n in names]
    return [g for g in GATES if g.name not in skip and (not g.optional or enabled(g.name))]


def of_kind(kind: str) -> list[GateSpec]:
    return [g for g in GATES if g.kind == kind]
