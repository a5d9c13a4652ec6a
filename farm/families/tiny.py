"""What every family's tiny test model is made of: the small width, the chat formats several
families share (ChatML, Gemma's turns), the turn-template writer for the others, and the request
the source stage sends to the toolchain's `make_model` (which knows no family: farm_common/
tiny_model.py). A family's own tiny model is its module's `tiny` (farm/families/<family>.py)."""

from __future__ import annotations

from typing import Any

from farm.errors import BadInput
from farm.families.base import get_family
from farm_common.tiny_model import TinySpec

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PAD, EOS = "<|endoftext|>", "<|im_end|>"

# ChatML. Content may be a string or a list of parts; only subscripts (no `.get`, no filters beyond
# `is string`) so that Jinja2, minja and minijinja all render it the same.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def _lit(text: str) -> str:
    """A Jinja string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def turn_template(user: str, assistant: str, system: str, close: str, generation: str,
                  assistant_close: str | None = None, image: str | None = None) -> str:
    """A chat template in one family's turn format: each turn opened by its role's marker, its
    content (a string or text parts, as litert-lm 0.18 passes it), closed by `close` (or, for the
    model's own turns, `assistant_close`); the generation prompt opens an assistant turn. With
    `image`, an image part renders as that marker. Only subscripts and `==`, so Jinja2, minja and
    minijinja render it alike."""
    a_close = close if assistant_close is None else assistant_close
    image_part = ("{%- elif part['type'] == 'image' -%}{{- " + _lit(image) + " -}}") if image else ""
    return (
        "{%- for message in messages -%}"
        "{%- if message['role'] == 'user' -%}{{- " + _lit(user) + " -}}"
        "{%- elif message['role'] == 'assistant' -%}{{- " + _lit(assistant) + " -}}"
        "{%- else -%}{{- " + _lit(system) + " -}}{%- endif -%}"
        "{%- if message['content'] is string -%}"
        "{{- message['content'] -}}"
        "{%- else -%}"
        "{%- for part in message['content'] -%}"
        "{%- if part['type'] == 'text' -%}{{- part['text'] -}}" + image_part + "{%- endif -%}"
        "{%- endfor -%}"
        "{%- endif -%}"
        "{%- if message['role'] == 'assistant' -%}{{- " + _lit(a_close) + " -}}"
        "{%- else -%}{{- " + _lit(close) + " -}}{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- " + _lit(generation) + " -}}{%- endif -%}"
    )


# Each family's chat turn format as its released models write it (the markers, simplified to the
# turns: no tools, no thinking blocks): (special tokens, pad first; the end-of-turn token; template).
CHATML = (SPECIAL_TOKENS, EOS, CHAT_TEMPLATE)
GEMMA = (("<pad>", "<start_of_turn>", "<end_of_turn>"), "<end_of_turn>",
         turn_template("<start_of_turn>user\n", "<start_of_turn>model\n", "<start_of_turn>user\n",
                       "<end_of_turn>\n", "<start_of_turn>model\n"))

# The decoder at small width: 4 layers, hidden 64, 4 query heads over 2 key/value heads, the
# architecture's own layer kinds (its module's `tiny`) kept.
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 512}


def tiny_spec(config_class: str, model_class: str, chat: tuple = CHATML, *, small: bool = True, split: str | None = None,
         layer_pattern: tuple[str, ...] | None = None, warn_if_unequal: tuple[str, str, str] | None = None,
         vision: dict[str, Any] | None = None, mm_tokens_per_image: int | None = None,
         image_markers: tuple[str, str, str] | None = None, **defaults: Any) -> TinySpec:
    """A family's tiny model: its config and model classes, its chat format, its config defaults
    (over SMALL unless `small` is False: the family writes them all)."""
    specials, eos, template = chat
    return TinySpec(config_class=config_class, model_class=model_class,
                    defaults={**(SMALL if small else {}), **defaults}, special_tokens=specials, end_of_turn=eos,
                    chat_template=template, split=split, layer_pattern=layer_pattern,
                    warn_if_unequal=warn_if_unequal, vision=vision, mm_tokens_per_image=mm_tokens_per_image,
                    image_markers=image_markers)


def make_model_request(family: str, **fields: Any) -> dict[str, Any]:
    """The toolchain's `make_model` request for this family's tiny model (fields: config, seed,
    tokenizer, output_dir, weights_grid); BadInput for a family without one."""
    spec = get_family(family).tiny
    if spec is None:
        raise BadInput(f"family {family!r} has no tiny model to generate: write its `tiny` in farm/families/{family}.py")
    return {"family": family, "spec": spec.model_dump(mode="json"), **fields}
