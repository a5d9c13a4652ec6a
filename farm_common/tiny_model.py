"""A family's tiny test model, as data on the wire: the family module declares it (farm/families/
<family>.py `tiny`), the source stage sends it in the `make_model` request, and the toolchain
(farm_toolchain/make_model.py) builds a seeded model from it, knowing no family itself.

Standard library and pydantic only (both environments import this module)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TinySpec(BaseModel):
    """The architecture at small width and its chat format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config_class: str = Field(min_length=1, description="the transformers config class, e.g. Phi3Config")
    model_class: str = Field(min_length=1, description="the transformers model class, one of the family's architectures")
    defaults: dict[str, Any] = Field(default_factory=dict, description="config fields at small width (a config's overrides win)")
    # The chat format: special tokens (pad first), the end-of-turn token (the eos), the template.
    special_tokens: tuple[str, ...] = Field(min_length=2)
    end_of_turn: str = Field(min_length=1)
    chat_template: str = Field(min_length=1)
    # A pre-tokenizer split regex the family's released tokenizer.json carries (Qwen2's digits).
    split: str | None = None
    # layer_types repeated from this pattern over num_hidden_layers when the config sets none.
    layer_pattern: tuple[str, ...] | None = None
    # Two config fields that should be equal, and the warning when an override makes them differ.
    warn_if_unequal: tuple[str, str, str] | None = None
    # An image-text model: its vision tower's config (config_class + fields), soft tokens per image,
    # and the image markers (begin, end, soft token) among the special tokens.
    vision: dict[str, Any] | None = None
    mm_tokens_per_image: int | None = Field(None, ge=1)
    image_markers: tuple[str, str, str] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "TinySpec":
        if self.end_of_turn not in self.special_tokens:
            raise ValueError(f"end_of_turn {self.end_of_turn!r} is not one of the special tokens")
        if self.vision is not None and (self.mm_tokens_per_image is None or self.image_markers is None
                                        or "config_class" not in self.vision):
            raise ValueError("an image-text tiny model needs vision.config_class, mm_tokens_per_image and image_markers")
        if self.image_markers and not set(self.image_markers) <= set(self.special_tokens):
            raise ValueError("the image markers must be special tokens")
        return self
