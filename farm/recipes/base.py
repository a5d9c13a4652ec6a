"""Quantization recipes as data: rules over ai-edge-quantizer's own vocabulary (recipes/*.yaml),
rendered to the exact list the quantizer loads (`Quantizer.load_quantization_recipe`).

A recipe is a list of rules. Each rule names a regex over op scopes, an op type (or `*`), an
algorithm (an `AlgorithmName` of the installed quantizer), the weights (bits 2/4/8, channelwise or
blockwise 32/64/128, symmetric) and what happens to activations: `dynamic` (int weights, float
activations quantized at run time: compute precision INTEGER), `weight_only` (weights dequantized
before a float op: compute precision FLOAT), `static` (int8/int16 activations from a calibration
set named in the recipe), or `float` (the op keeps float weights: `no_quantize`). Entries match
with `re.search(regex, scope)`, an op's scope being its output tensor names joined by ';' plus a
trailing ';' (ai_edge_quantizer/utils/tfl_flatbuffer_utils.py `get_op_scope`); every matching
entry applies in order and the LAST one wins (recipe_manager.py `get_quantization_configs`).

Two convenience forms render to rules: `scheme: dynamic_wi8_afp32` (int8 channelwise dynamic on
FULLY_CONNECTED and EMBEDDING_LOOKUP, the op_config of the quantizer's own
`recipe.dynamic_wi8_afp32()`, first) and `float_exceptions` (no_quantize rules, last). The recipes
written before rules existed render byte for byte as they did, so their digests (and every cache
key and lineage row made with them) stand.

What this module checks is the vocabulary and the quantizer's ordering rules; what the installed
quantizer accepts (an algorithm it has, a config its policy allows for the op) is checked by the
toolchain's `check_recipe` before any work (farm/stages/quantize.py `check_recipe`), and what a
rule really did is read back from the flatbuffer after quantizing.

No Prefect, no toolchain imports: this is orchestrator-side and pure (YAML in, dicts out).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from farm.errors import BadInput
from farm.recipes.allowances import DEFAULTS as DEFAULT_ALLOWANCES, Allowances, recipe_class
from farm.recipes.modes.registry import DEFAULT_ALGORITHM, MODES, Mode
from farm_common.algorithms import RECOVERY

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"  # the shipped recipes

BASE_REGEX = ".*"
BASE_OPERATIONS = ("FULLY_CONNECTED", "EMBEDDING_LOOKUP")

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
_OP = r"^(\*|[A-Z][A-Z0-9_]*)$"  # a TFLite op name as the quantizer spells it (qtyping.TFLOperationName)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _compiles(v: str, what: str) -> str:
    try:
        re.compile(v)
    except re.error as exc:
        # Not a ValueError: pydantic lets it through as the farm's one-line BadInput.
        raise BadInput(f"{what} regex {v!r} does not compile: {exc}") from None
    return v


class Weights(_Strict):
    """The weight tensors of the matched ops."""

    bits: Literal[2, 4, 8] = 8
    granularity: Literal["channelwise", "blockwise_32", "blockwise_64", "blockwise_128"] = "channelwise"
    # LiteRT kernels take symmetric weights only (the quantizer's add_*_config hard-code it); an
    # asymmetric rule is accepted here and refused by the quantizer's own policy check.
    symmetric: bool = True

    def render(self) -> dict[str, Any]:
        return {"num_bits": self.bits, "symmetric": self.symmetric, "granularity": self.granularity.upper(), "dtype": "INT"}

    def label(self) -> str:
        g = "c" if self.granularity == "channelwise" else "b" + self.granularity.split("_")[1]
        return f"int{self.bits} {g}"


class _Scoped(_Strict):
    """What every recipe entry has: a name, a regex over op scopes, why, and the layers it aims at
    (the quantize stage checks them against the model family's layers: aimed at layers the model
    has but matching no op = a broken regex)."""

    what: ClassVar[str] = "rule"  # named in a regex error
    name: str = Field(pattern=_NAME)
    regex: str = Field(min_length=1)
    reason: str = ""
    layers: list[str] = Field(default_factory=list)

    @field_validator("regex")
    @classmethod
    def _regex_compiles(cls, v: str) -> str:
        return _compiles(v, cls.what)


class Rule(_Scoped):
    """One recipe entry: ops of type `op` whose scope matches `regex` get this treatment; what the
    treatment is comes from the rule's mode (farm/recipes/modes/, one module per mode)."""

    op: str = Field(default="*", pattern=_OP)
    mode: str = "dynamic"
    # An AlgorithmName value of the installed quantizer ("min_max_uniform_quantize", "OCTAV",
    # "GPTQ", …: its own spelling, both cases); which ones exist is the toolchain's check_recipe.
    algorithm: str = Field(default=DEFAULT_ALGORITHM, pattern=r"^[A-Za-z0-9_]+$")
    weights: Weights = Field(default_factory=Weights)
    activation_bits: Literal[8, 16] | None = None  # static only: int16 symmetric or int8 asymmetric

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, v: str) -> str:
        if v not in MODES:
            raise ValueError(f"mode {v!r} is not a rule mode: the modes are {', '.join(MODES.names())}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Rule":
        self.treatment.check(self)
        return self

    @property
    def treatment(self) -> Mode:
        return MODES.get(self.mode)

    @property
    def algorithm_key(self) -> str:
        return self.treatment.algorithm_key(self)

    def op_config(self) -> dict[str, Any]:
        return self.treatment.op_config(self)

    def render(self) -> dict[str, Any]:
        return {"regex": self.regex, "operation": self.op, "algorithm_key": self.algorithm_key,
                "op_config": self.op_config()}

    def expected_bits(self) -> int | None:
        """The weight bit width the read-back must find on this rule's ops (None: float)."""
        return self.treatment.expected_bits(self)

    def label(self) -> str:
        return self.treatment.label(self)


class FloatException(_Scoped):
    """Ops whose scope matches `regex` keep float weights (a `mode: float` rule on every op type)."""

    what: ClassVar[str] = "float exception"

    def rule(self) -> Rule:
        return Rule(name=self.name, regex=self.regex, op="*", mode="float", reason=self.reason, layers=self.layers)


class Calibration(_Strict):
    """The text a static recipe calibrates its activation ranges on (a file next to the recipe):
    each non-empty line is one sample, tokenized with the model's own tokenizer. Its sha256 is
    part of the recipe's digest, so a changed calibration set is a different recipe."""

    file: str = Field(min_length=1)
    samples: int = Field(default=16, ge=1, le=1024)
    max_tokens: int = Field(default=64, ge=4, le=4096)
    # How the samples are made: "fresh" (each line into every signature from an empty cache at
    # position 0) or "runtime" (each line run through the float model as litert-lm runs a prompt:
    # prefill chunks, then decode steps on the filled KV cache, then `generate` greedy tokens).
    steps: Literal["fresh", "runtime"] = "fresh"
    generate: int = Field(default=8, ge=0, le=256)


class Recipe(_Strict):
    name: str = Field(pattern=_NAME)
    description: str = ""
    scheme: Literal["dynamic_wi8_afp32"] | None = None
    rules: list[Rule] = Field(default_factory=list)
    float_exceptions: list[FloatException] = Field(default_factory=list)
    calibration: Calibration | None = None
    # What the recipe's bytes may cost (farm/recipes/allowances.py); unset ones come from its class.
    allowances: Allowances | None = None
    # The recipe holds the source's own 4-bit grid: its float export splits each linear layer on an
    # affine 4-bit block grid into `grid_sym` and `grid_offset` ops (farm_toolchain/grid.py), which
    # its rules match. A build with it converts with export.source_grid set.
    source_grid: bool = False
    # Every weight kept float on purpose (the float column of the family matrix, issue 18): without
    # it a recipe whose rules all keep ops float is a mistake, refused.
    float_only: bool = False
    # Set by the loader: the calibration file's sha256 (part of the digest) and where it is.
    calibration_sha256: str | None = None
    calibration_path: str | None = None

    @model_validator(mode="after")
    def _valid(self) -> "Recipe":
        rules = self.all_rules()
        if not rules:
            raise ValueError("a recipe needs rules (or scheme: dynamic_wi8_afp32)")
        if any(r.treatment.quantizes for r in rules) == self.float_only:
            raise ValueError("a float_only recipe quantizes nothing: drop float_only or its quantizing rules"
                             if self.float_only else
                             "every rule keeps ops float: a recipe must quantize something (or say float_only: true)")
        for label, values in (("name", [r.name for r in rules]),):
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:
                raise ValueError(f"rules repeat the {label} {dup[0]!r}")
        # The quantizer keys entries by regex (RecipeManager._scope_configs is an OrderedDict): entries
        # sharing a regex are merged in the place of the first, and `*` on a regex replaces what came
        # before it. A recipe it would reorder or merge is not the recipe as written.
        seen: dict[str, int] = {}
        for i, r in enumerate(rules):
            if r.regex in seen and seen[r.regex] != i - 1:
                raise ValueError(f"rule {r.name!r} repeats the regex {r.regex!r} of an earlier rule that is not "
                                 "the one before it: the quantizer would merge them out of order; give rules that "
                                 "share a regex one after another")
            seen[r.regex] = i
        by_regex: dict[str, list[Rule]] = {}
        for r in rules:
            by_regex.setdefault(r.regex, []).append(r)
        for regex, group in by_regex.items():
            ops = [r.op for r in group]
            if len(group) > 1 and "*" in ops:
                raise ValueError(f"rules {', '.join(repr(r.name) for r in group)} share the regex {regex!r} and one "
                                 "targets every op (*): the quantizer keeps only that one; use distinct regexes")
            dup = sorted({o for o in ops if ops.count(o) > 1})
            if dup:
                raise ValueError(f"two rules give {dup[0]} under the same regex {regex!r}: the quantizer keeps only "
                                 "the later; merge them")
        static = [r.name for r in rules if r.treatment.calibrated]
        if static and self.calibration is None:
            raise ValueError(f"rule {static[0]!r} is static: the recipe needs a calibration set (calibration.file)")
        if self.calibration is not None and not static:
            raise ValueError("calibration is for recipes with a static rule; no rule is static")
        return self

    def all_rules(self) -> list[Rule]:
        """The rules in the order the quantizer applies them: the scheme's base rules, the recipe's
        own rules, the float exceptions (last match wins)."""
        base = []
        if self.scheme == "dynamic_wi8_afp32":
            base = [Rule(name=f"base_{op.lower()}", regex=BASE_REGEX, op=op) for op in BASE_OPERATIONS]
        return base + list(self.rules) + [e.rule() for e in self.float_exceptions]

    def render(self) -> list[dict[str, Any]]:
        """The exact ai-edge-quantizer recipe, entry for entry."""
        return [r.render() for r in self.all_rules()]

    def toolchain_rules(self) -> list[dict[str, Any]]:
        """The `rules` field of a toolchain `quantize` request: what the read-back checks per rule."""
        return [{"name": r.name, "regex": r.regex, "operation": r.op, "expected_bits": r.expected_bits(),
                 "algorithm_key": r.algorithm_key, "op_config": r.op_config()} for r in self.all_rules()]

    def needs_calibration(self) -> bool:
        return any(r.treatment.calibrated for r in self.all_rules())

    def digest(self) -> str:
        """sha256 of canonical JSON of {name, rendered recipe} (+ the calibration set's sha256 and
        sampling when there is one): what the quantizer is told, plus the name. Descriptions and
        reasons are prose and do not change it."""
        body: dict[str, Any] = {"name": self.name, "recipe": self.render()}
        if self.calibration is not None:
            body["calibration"] = {"sha256": self.calibration_sha256, "samples": self.calibration.samples,
                                   "max_tokens": self.calibration.max_tokens}
            if self.calibration.steps != "fresh":  # the recipes written before steps existed keep their digest
                body["calibration"].update(steps=self.calibration.steps, generate=self.calibration.generate)
        if self.allowances is not None:  # how its bytes are judged is part of what the recipe is
            body["allowances"] = self.allowances.model_dump(exclude={"basis"}, exclude_none=True)
        if self.source_grid:  # the float export it quantizes is another one
            body["source_grid"] = True
        blob = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def min_weight_bits(self) -> int | None:
        """The smallest weight bit width the recipe writes (None: every rule keeps ops float)."""
        bits = [b for b in (r.expected_bits() for r in self.all_rules()) if b is not None]
        return min(bits) if bits else None

    def rounding_bits(self) -> int | None:
        """The smallest weight bit width the recipe rounds weights to: a source-grid recipe's
        recovery rules write the source's own integers back (only each block's step is stored at
        bf16 precision), so they do not count (None: nothing is rounded)."""
        bits = [r.expected_bits() for r in self.all_rules()
                if not (self.source_grid and r.algorithm_key == RECOVERY)]
        bits = [b for b in bits if b is not None]
        return min(bits) if bits else None

    def allowances_in_force(self) -> dict[str, Any]:
        """{"class", "allowances" (the declared ones over the class defaults), "declared" (the keys
        the recipe sets), "basis"}. The class is that of the smallest bit width the recipe rounds
        weights to (`rounding_bits`)."""
        cls = recipe_class(self.rounding_bits())
        default = DEFAULT_ALLOWANCES[cls]
        declared = self.allowances.model_dump(exclude_none=True, exclude={"basis"}) if self.allowances else {}
        merged = Allowances(**{**default.model_dump(exclude_none=True, exclude={"basis"}), **declared})
        basis = (self.allowances.basis if self.allowances and self.allowances.basis else "") or default.basis
        if self.rounding_bits() != self.min_weight_bits():
            basis = (f"the int{self.min_weight_bits()} weights hold the source's own grid (dequantized-weight recovery "
                     f"keeps every integer; the quantizer stores each block's step at bf16 precision, at most 2^-8 "
                     f"of a weight), so the file is judged by the class of what it does round, {cls}: " + basis)
        return {"class": cls, "allowances": merged, "declared": sorted(declared), "basis": basis}

    def summary(self) -> str:
        """One line per rule, for the terminal and the card: "linears: int4 b32 dynamic on FULLY_CONNECTED"."""
        return "; ".join(f"{r.name}: {r.label()} on {r.op}" for r in self.all_rules())


def list_recipes(recipes_dir: Path) -> list[str]:
    """Names of the recipes in recipes_dir (the stems of its *.yaml files), sorted."""
    d = Path(recipes_dir)
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.yaml") if p.is_file())


def load_recipe(name_or_path: str | Path, recipes_dir: Path) -> Recipe:
    """A recipe by name (recipes_dir/<name>.yaml) or by path to a YAML file."""
    text = str(name_or_path)
    looks_like_path = text.endswith((".yaml", ".yml")) or "/" in text or "\\" in text
    if looks_like_path:
        path = Path(text).expanduser()
        if not path.is_file():
            raise BadInput(f"recipe file {text!r} not found: pass a recipe name or a path to a recipe YAML")
    else:
        path = Path(recipes_dir) / f"{text}.yaml"
        if not path.is_file():
            known = list_recipes(recipes_dir)
            listing = ", ".join(known) if known else "none"
            raise BadInput(
                f"unknown recipe {text!r}: known recipes are {listing} ({Path(recipes_dir) / '*.yaml'}); "
                "pass one of them or a path to a recipe YAML"
            )
    return _parse(path)


def _parse(path: Path) -> Recipe:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"recipe {str(path)!r} is not UTF-8 text: is it a recipe YAML?") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise BadInput(f"recipe {str(path)!r} is not valid YAML: {problem}{where}") from None
    if not isinstance(raw, dict):
        raise BadInput(f"recipe {str(path)!r} must be a YAML mapping with name, rules (or scheme), float_exceptions")
    raw.setdefault("name", path.stem)
    if raw["name"] != path.stem:
        raise BadInput(f"recipe {str(path)!r} is named {raw['name']!r}: a recipe's name must match its file name")
    try:
        raw.pop("calibration_sha256", None)  # set from the file, never by the YAML
        raw.pop("calibration_path", None)
        recipe = Recipe.model_validate(raw)
        if recipe.calibration is not None:
            recipe = _with_calibration(recipe, path)
        return recipe
    except BadInput as exc:  # a regex that does not compile
        raise BadInput(f"recipe {str(path)!r}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise BadInput(f"recipe {str(path)!r}: {loc + ': ' if loc else ''}{msg}") from None


def _with_calibration(recipe: Recipe, path: Path) -> Recipe:
    """The calibration file, relative to the recipe's folder, hashed into the recipe."""
    cal = (path.parent / recipe.calibration.file).resolve()
    if not cal.is_file():
        raise BadInput(f"recipe {str(path)!r}: calibration file {recipe.calibration.file!r} not found next to it "
                       f"({cal}): ship the text file with the recipe")
    data = cal.read_bytes()
    try:
        lines = [x for x in data.decode("utf-8").splitlines() if x.strip()]
    except UnicodeDecodeError:
        raise BadInput(f"recipe {str(path)!r}: calibration file {str(cal)!r} is not UTF-8 text") from None
    if len(lines) < recipe.calibration.samples:
        raise BadInput(f"recipe {str(path)!r}: calibration file {str(cal)!r} has {len(lines)} non-empty lines but "
                       f"the recipe asks for {recipe.calibration.samples} samples: add lines or lower samples")
    return recipe.model_copy(update={"calibration_sha256": hashlib.sha256(data).hexdigest(), "calibration_path": str(cal)})
