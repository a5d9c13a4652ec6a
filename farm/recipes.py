"""Quantization recipes: a small YAML model (recipes/*.yaml) rendered to ai-edge-quantizer's format.

A recipe is a base scheme plus named float exceptions. `render()` produces the exact list the
quantizer loads (`Quantizer.load_quantization_recipe`): entries `{regex, operation, algorithm_key,
op_config}` matched with `re.search(regex, scope)`, where an op's scope is its output tensor names
joined by ';' plus a trailing ';' (ai_edge_quantizer/utils/tfl_flatbuffer_utils.py `get_op_scope`).
Every matching entry applies in order and the LAST one wins
(ai_edge_quantizer/recipe_manager.py `get_quantization_configs`), so the base entries come first and
the exceptions (`algorithm_key: no_quantize`) after them.

Scheme `dynamic_wi8_afp32`: int8 symmetric channelwise weights, float32 activations (dynamically
quantized at run time: compute_precision INTEGER, no explicit dequantize). The op_config is the one
ai_edge_quantizer 0.10.0's own `recipe.dynamic_wi8_afp32()` produces; its entry there targets
operation "*" (every op the algorithm supports, which on Qwen3.5 also int8-quantizes the
GatedDeltaNet DEPTHWISE_CONV_2D kernels); ours names FULLY_CONNECTED and EMBEDDING_LOOKUP, the
weight-bearing ops of a decoder LLM, as litert-torch's own local recipes do per op type.

No Prefect, no toolchain imports: this is orchestrator-side and pure (YAML in, dicts out).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from farm.errors import BadInput

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"  # the shipped recipes

BASE_REGEX = ".*"
BASE_OPERATIONS = ("FULLY_CONNECTED", "EMBEDDING_LOOKUP")

# ai_edge_quantizer 0.10.0 recipe.dynamic_wi8_afp32() op_config, key for key. The toolchain's
# quantize command refuses a recipe the quantizer does not re-emit unchanged, so a drift shows.
_DYNAMIC_WI8_AFP32_OP_CONFIG: dict[str, Any] = {
    "weight_tensor_config": {"num_bits": 8, "symmetric": True, "granularity": "CHANNELWISE", "dtype": "INT"},
    "compute_precision": "INTEGER",
    "explicit_dequantize": False,
    "skip_checks": False,
    "min_weight_elements": 0,
}
# What the quantizer itself writes for a no_quantize entry when it re-emits a loaded recipe
# (`RecipeManager.get_quantization_recipe`): rendering it the same way makes the round trip exact.
_NO_QUANTIZE_OP_CONFIG: dict[str, Any] = {
    "compute_precision": "FLOAT",
    "explicit_dequantize": False,
    "skip_checks": False,
    "min_weight_elements": 0,
}

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FloatException(_Strict):
    """Ops whose scope matches `regex` keep float weights (rendered as a no_quantize entry)."""

    name: str = Field(pattern=_NAME)
    regex: str = Field(min_length=1)
    reason: str = ""
    # Layer names this exception aims at (e.g. in_proj_a). The quantize stage checks them against
    # the model family's layers: aimed at layers the model has but matching no op = broken regex.
    layers: list[str] = Field(default_factory=list)

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            # Not a ValueError: pydantic lets it through as the farm's one-line BadInput.
            raise BadInput(f"float exception regex {v!r} does not compile: {exc}") from None
        return v

    def render(self) -> dict[str, Any]:
        return {
            "regex": self.regex,
            "operation": "*",
            "algorithm_key": "no_quantize",
            "op_config": dict(_NO_QUANTIZE_OP_CONFIG),
        }


class Recipe(_Strict):
    name: str = Field(pattern=_NAME)
    description: str = ""
    scheme: Literal["dynamic_wi8_afp32"]
    float_exceptions: list[FloatException] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct(self) -> "Recipe":
        # The quantizer keys its entries by regex (RecipeManager._scope_configs is an OrderedDict):
        # an exception repeating another regex, or the base ".*", would be merged, not appended.
        names = [e.name for e in self.float_exceptions]
        regexes = [e.regex for e in self.float_exceptions]
        for label, values in (("name", names), ("regex", regexes)):
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:
                raise ValueError(f"float exceptions repeat the {label} {dup[0]!r}")
        if BASE_REGEX in regexes:
            raise ValueError(f"a float exception cannot use the base regex {BASE_REGEX!r}")
        return self

    def render(self) -> list[dict[str, Any]]:
        """The exact ai-edge-quantizer recipe: base entries, then the exceptions (last match wins)."""
        base = [
            {
                "regex": BASE_REGEX,
                "operation": op,
                "algorithm_key": "min_max_uniform_quantize",
                "op_config": json.loads(json.dumps(_DYNAMIC_WI8_AFP32_OP_CONFIG)),
            }
            for op in BASE_OPERATIONS
        ]
        return base + [e.render() for e in self.float_exceptions]

    def toolchain_exceptions(self) -> list[dict[str, str]]:
        """The `exceptions` field of a toolchain `quantize` request."""
        return [{"name": e.name, "regex": e.regex} for e in self.float_exceptions]

    def digest(self) -> str:
        """sha256 of canonical JSON of {name, rendered recipe}: what the quantizer is told, plus the
        name. Descriptions and reasons are prose and do not change it."""
        blob = json.dumps(
            {"name": self.name, "recipe": self.render()}, sort_keys=True, separators=(",", ":"), ensure_ascii=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()


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
        raise BadInput(f"recipe {str(path)!r} must be a YAML mapping with name, scheme, float_exceptions")
    raw.setdefault("name", path.stem)
    if raw["name"] != path.stem:
        raise BadInput(f"recipe {str(path)!r} is named {raw['name']!r}: a recipe's name must match its file name")
    try:
        return Recipe.model_validate(raw)
    except BadInput as exc:  # a regex that does not compile
        raise BadInput(f"recipe {str(path)!r}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise BadInput(f"recipe {str(path)!r}: {loc + ': ' if loc else ''}{msg}") from None
