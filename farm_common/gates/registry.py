"""A gate's contract, in the environment-neutral package: one module per gate in farm_common/gates/
holds its settings model (the `gates.<gate>:` section of a build config, with the defaults written
once for both environments), its spec and its request builder, registered with
`@GATES.register(...)` (the way llama.cpp's convert_hf_to_gguf.py registers a class per
architecture); the measurement is the toolchain's, `farm_toolchain/gates/<gate>.py`, registered under
the same name with `@MEASUREMENTS.register(name)`. Adding a gate is those two files: the suite
(farm/gates/suite.py) runs every registered gate, the card lists every result, and a gate that
declares a `card_line` writes its own line in its card section and one that declares a
`card_pitfall` its own pitfall in card.json (farm/cards/ names no gate).

    @GATES.register("generation_parity", kind="parity", version=2, params=GenerationParity, order=20,
                    sections=(...))
    def request(ctx, p: GenerationParity) -> GateRequest | None: ...

The builder names the files it needs by role (`bundle`, `float_export`, `tokenizer`, `reference`:
the recorded source folder, `float_vision_encoder`: an image export's float encoder, `text_twin`:
the text build of an image bundle's source and recipe) and gives every other value in `args`; the
suite digests (args + the identity of every role) into the result's reuse key, and materializes the
roles' local, verified paths only for gates that really run. `ctx` is the suite's context, read by
attribute (the orchestrator's SuiteContext; nothing here imports the orchestrator).
`tests/unit/farm/gates/test_registry.py` fails when a gate lacks either half.

The toolchain's measurement reads its request's settings with the same model (`parse`), so a
request written by hand gets the same defaults and the same checks. A default of None means "the
measurement decides" (documented where the measurement does it).

Kinds group gates for sibling re-checks: when a gate fails, the siblings re-run every gate of its kind.
Standard library and pydantic only: both environments import this package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from farm_common.registry import Registry
from farm_common.wire import BadInput

P = TypeVar("P", bound="GateParams")


class GateParams(BaseModel):
    """A gate's settings (`gates.<gate>: {...}` in a build config): unknown keys are refused, and so
    is a value of the wrong type (strict: `true` is not a count, "0.5" is not a number)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NoParams(GateParams):
    """A gate with no settings: any key given for it is bad input."""


def parse(model: type[P], request: dict[str, Any]) -> P:
    """The settings a request carries (its other keys, files and derived values, are not settings),
    validated by the gate's model; ValueError with one line naming the setting otherwise."""
    given = {k: request[k] for k in model.model_fields if k in request}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        raise ValueError(one_line(exc)) from None


def one_line(exc: ValidationError, prefix: str = "") -> str:
    """A validation error as '<where>: <what>' (the first error: the one to fix first)."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    where = ".".join(x for x in (prefix, loc) if x)
    return f"{where + ': ' if where else ''}{err['msg'].removeprefix('Value error, ')}"



def card_text(text: Any, limit: int = 180) -> str:
    """A value as one line of a card (a table cell or a list item): whitespace folded, pipes escaped,
    cut at `limit` with an ellipsis."""
    s = " ".join(str(text).split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"


# (the file's current result of this gate or None, where it was measured) -> the card's line or None
CardLine = Callable[["dict[str, Any] | None", str], "str | None"]
# (a current result of this gate) -> the pitfall card.json lists for it, or None
CardPitfall = Callable[["dict[str, Any]"], "str | None"]


@dataclass(frozen=True)
class CardTable:
    """A table a gate writes in its card section: the sentence that leads it in, its own columns, and
    one row per current result (`row(result)` -> the cells, or None: no row for that result). The
    renderer adds the file before the gate's columns, and the status and where it was measured after."""

    lead: str
    columns: tuple[str, ...]
    row: Callable[["dict[str, Any]"], "list[str] | None"]


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


def image_turns_against_reference(ctx: Any, settings: GateParams) -> GateRequest | None:
    """The request of a gate of image turns: against the reference, on an image bundle only (a text
    bundle has no image turn to measure, and its decoder looks its tokens up itself)."""
    return against_reference(ctx, settings) if ctx.image else None


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
    # The card section a result of this gate writes a line in (farm/cards/render.py: "image_input",
    # "usage"), and the line: (the file's current result, where it was measured) -> text, or None.
    card_section: str | None = None
    card_line: CardLine | None = None
    # A pitfall card.json lists from a current (not stale) result of this gate (farm/cards/model.py).
    card_pitfall: CardPitfall | None = None
    # A table of this gate's results in its card section ("quality"; farm/cards/render.py).
    card_table: CardTable | None = None


def _make(name: str, build: Builder, attrs: dict[str, Any]) -> GateSpec:
    spec = GateSpec(name=name, build=build, **{"params": NoParams, **attrs})
    if spec.target not in ("bundle", "float"):
        raise ValueError(f"gate {name}: target must be 'bundle' or 'float'")
    if spec.kind not in KINDS:
        raise ValueError(f"gate {name}: kind must be one of {', '.join(KINDS)}")
    return spec


GATES: Registry[GateSpec] = Registry("gate", "farm_common.gates", make=_make, order=lambda g: g.order,
                                     support=("registry",), error=BadInput)


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
