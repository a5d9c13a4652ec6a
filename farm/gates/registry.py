"""The gate registry: one registered unit per gate, on each side, joined by its name.

- here (`farm/gates/<gate>.py`): its spec — name, kind, version, target, the settings model from
  `farm_common/gate_params.py` (defaults written once for both environments), the bundle sections
  its measurement depends on, its place in the run order — and its request builder, registered
  with `@GATES.register(...)` (the way llama.cpp's convert_hf_to_gguf.py registers a class per
  architecture);
- there (`farm_toolchain/gates/<gate>.py`): the measurement, registered under the same name.

    @GATES.register("generation_parity", kind="parity", version=2, params=GenerationParity, order=20,
                    sections=(...))
    def request(ctx, p: GenerationParity) -> GateRequest | None: ...

The builder names the files it needs by role (`bundle`, `float_export`, `tokenizer`, `reference`:
the recorded source folder, `float_vision_encoder`: an image export's float encoder, `text_twin`:
the text build of an image bundle's source and recipe) and gives every other value in `args`; the suite (farm/gates/suite.py)
digests (args + the identity of every role) into the result's reuse key, and materializes the
roles' local, verified paths only for gates that really run. `tests/unit/farm/gates/
test_registry.py` fails when a gate lacks either half.

Kinds group gates for sibling re-checks: when a gate fails, the siblings re-run every gate of its kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from farm.errors import BadInput
from farm_common.gate_params import GateParams, NoParams
from farm_common.registry import Registry

ROLES = ("bundle", "float_export", "tokenizer", "reference", "float_vision_encoder", "text_twin")
KINDS = ("parity", "quality", "tokenizer", "robustness", "metadata")


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


def against_reference(ctx: Any, settings: GateParams) -> GateRequest:
    """The request of a gate that runs the bundle against the recorded PyTorch reference, which
    stops by the source's own end-of-sequence ids (never the bundle's): its settings as args."""
    return GateRequest(inputs={"bundle_path": "bundle", "model_dir": "reference"},
                       args={**settings.model_dump(), "reference_stop_ids": ctx.reference_stop_ids})


# (the suite's context, the gate's validated settings) -> the request, or None: does not apply
Builder = Callable[[Any, Any], "GateRequest | None"]


@dataclass(frozen=True)
class GateSpec:
    name: str
    kind: str  # one of KINDS
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
    # Where the gate runs in a suite (and is listed on a card): lower first.
    order: int = 100
    # The answers depend on the runtime's kernels (XNNPACK picks them per CPU class): the gate runs
    # on every enabled CPU class, not only on this host's (farm/devices/classes.py).
    per_class: bool = False


def _make(name: str, build: Builder, attrs: dict[str, Any]) -> GateSpec:
    spec = GateSpec(name=name, build=build, **{"params": NoParams, **attrs})
    if spec.target not in ("bundle", "float"):
        raise ValueError(f"gate {name}: target must be 'bundle' or 'float'")
    if spec.kind not in KINDS:
        raise ValueError(f"gate {name}: kind must be one of {', '.join(KINDS)}")
    return spec


GATES: Registry[GateSpec] = Registry("gate", "farm.gates", make=_make, order=lambda g: g.order,
                                     support=("registry", "config", "suite"), error=BadInput)


def gate_names() -> list[str]:
    return GATES.names()


def select(names: list[str] | None, skip: list[str] = (), enabled: Callable[[str], bool] = lambda _n: False) -> list[GateSpec]:
    """The gates to run: the named ones (any name unknown is bad input), or every one that applies:
    not skipped, and optional ones only when `enabled` says the config asks for them."""
    if names:
        return [GATES.get(n) for n in names]
    return [g for g in GATES if g.name not in skip and (not g.optional or enabled(g.name))]


def of_kind(kind: str) -> list[GateSpec]:
    return [g for g in GATES if g.kind == kind]


def for_sibling(names: list[str], skip: list[str] | tuple[str, ...]) -> list[str]:
    """The gates a sibling re-check runs on one file: the failed gate's kind, less what that file's
    own build config skips (a base model's skipped conversation gates have no chat template to
    render: run anyway, they recorded failures the file was never built to pass)."""
    return [n for n in names if n not in skip]
