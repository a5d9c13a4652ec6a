"""`make_model`: a seeded tiny test model written as an ordinary Hugging Face folder.

Request:
    {"family": an architecture of FAMILIES below ("qwen3_5", "llama", "gemma3", "qwen3_moe", ...),
     "config": {transformers config overrides}, "seed": int,
     "tokenizer": {"vocab_size": int}, "output_dir": str, "weights_grid": null | "q4_1"}
Result:
    {"output_dir", "files": [sorted relative names], "params": int, "architecture": str}

The folder holds config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json and chat_template.jinja. The tokenizer is a byte-level BPE trained here on
farm_toolchain/data/tokenizer_corpus.txt with the architecture's chat special tokens first (ChatML's
<|endoftext|> (0, pad), <|im_start|> (1) and <|im_end|> (2, eos); Gemma's <pad>, <start_of_turn>,
<end_of_turn>; Phi-3's, Mistral's, OLMo 2's, Granite's, EXAONE's, Command's markers), the end-of-turn
token as eos; no bos. The template, in the architecture's own turn format, accepts message content as
a string or as a list of content parts ({"type": "text", "text": ...}), which is what litert-lm 0.18
passes.

`weights_grid: "q4_1"` puts every linear layer's weights (not the embedding's) on GGUF Q4_1's grid, as
a model dequantized from a Q4_1 file has them: per block of 32 inputs, min m and step d stored as
float16, each weight m + d * k with k = round((w - m) / d) in 0..15 (llama.cpp's quantize_row_q4_1).
It is how the tests make a tiny model whose source-grid export splits (farm_toolchain/grid.py).

Deterministic: the same request gives byte-identical files (torch is seeded before init, the BPE
trainer runs single-threaded, safetensors metadata is fixed). The model is built in a temporary
sibling folder and renamed into place; an existing non-empty output_dir is accepted only when it
already holds exactly these bytes (a re-run), otherwise the request is bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm_toolchain import model_folder, protocol
from farm_toolchain.commands import COMMANDS, OFFLINE
from farm_toolchain.protocol import BadInput

CORPUS = Path(__file__).with_name("data") / "tokenizer_corpus.txt"
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
# Gemma 3's chat format with its image markers: an image part renders as <start_of_image>, which the
# processor (and litert-lm) expand to the image's soft tokens between <start_of_image> and <end_of_image>.
IMAGE_MARKERS = ("<start_of_image>", "<end_of_image>", "<image_soft_token>")
GEMMA_VL = (GEMMA[0] + IMAGE_MARKERS, "<end_of_turn>",
            turn_template("<start_of_turn>user\n", "<start_of_turn>model\n", "<start_of_turn>user\n",
                          "<end_of_turn>\n", "<start_of_turn>model\n", image="<start_of_image>"))
PHI3 = (("<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"), "<|end|>",
        turn_template("<|user|>\n", "<|assistant|>\n", "<|system|>\n", "<|end|>\n", "<|assistant|>\n"))
MISTRAL = (("<unk>", "<s>", "</s>", "[INST]", "[/INST]"), "</s>",
           turn_template("[INST] ", "", "[INST] ", " [/INST]", "", assistant_close="</s>"))
OLMO2 = (("<|pad|>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>"), "<|endoftext|>",
         turn_template("<|user|>\n", "<|assistant|>\n", "<|system|>\n", "\n", "<|assistant|>\n",
                       assistant_close="<|endoftext|>\n"))
GRANITE = (("<|pad|>", "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"), "<|end_of_text|>",
           turn_template("<|start_of_role|>user<|end_of_role|>", "<|start_of_role|>assistant<|end_of_role|>",
                         "<|start_of_role|>system<|end_of_role|>", "<|end_of_text|>\n",
                         "<|start_of_role|>assistant<|end_of_role|>"))
EXAONE = (("[PAD]", "[|user|]", "[|assistant|]", "[|system|]", "[|endofturn|]"), "[|endofturn|]",
          turn_template("[|user|]", "[|assistant|]", "[|system|]", "[|endofturn|]\n", "[|assistant|]"))
COHERE = (("<PAD>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
           "<|SYSTEM_TOKEN|>"), "<|END_OF_TURN_TOKEN|>",
          turn_template("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
                        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
                        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"))

# Qwen2's pre-tokenizer split (digits one by one), as its released tokenizer.json files carry it:
# transformers 5's Qwen2Tokenizer installs it whatever tokenizer.json says, so a tiny qwen2 whose
# tokenizer.json lacked it would tokenize differently in transformers than in the runtime (measured:
# "1, 2, 3, 4," 8 ids in the runtime, 11 in transformers) - a defect of the tiny model, not the family.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


# The decoder at small width: 4 layers, hidden 64, 4 query heads over 2 key/value heads, the
# architecture's own layer kinds (below) kept.
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 512}


def _spec(config_class: str, model_class: str, chat: tuple = CHATML, **defaults: Any) -> dict[str, Any]:
    specials, eos, template = chat
    return {"config_class": config_class, "model_class": model_class, "defaults": {**SMALL, **defaults},
            "special_tokens": specials, "end_of_turn": eos, "chat_template": template}


FAMILIES: dict[str, dict[str, Any]] = {
    "qwen3_5": {
        "config_class": "Qwen3_5TextConfig",
        "model_class": "Qwen3_5ForCausalLM",
        "defaults": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            # Equal key/value head counts: 2 key / 4 value heads breaks the fused GDN export
            # (litert-lm output differs from PyTorch).
            "linear_num_key_heads": 4,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4,
            "max_position_embeddings": 512,
            "tie_word_embeddings": False,
        },
    },
    "llama": {
        "config_class": "LlamaConfig",
        "model_class": "LlamaForCausalLM",
        "defaults": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 512,
            "tie_word_embeddings": False,
        },
    },
    # The family matrix (issue 18): each architecture's own config class, its layer kinds at small
    # width (sliding windows shorter than the export's cache, QK-norm, tied or untied heads, MoE
    # routing, short convolutions, NoPE layers), its chat format.
    "qwen2": {**_spec("Qwen2Config", "Qwen2ForCausalLM", tie_word_embeddings=True), "split": QWEN2_SPLIT},  # q/k/v biases
    "qwen3": _spec("Qwen3Config", "Qwen3ForCausalLM", head_dim=16, tie_word_embeddings=True),  # QK-norm
    "qwen3_moe": _spec("Qwen3MoeConfig", "Qwen3MoeForCausalLM", head_dim=16, num_local_experts=4,
                       num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                       tie_word_embeddings=False),
    "smollm3": _spec("SmolLM3Config", "SmolLM3ForCausalLM", no_rope_layer_interval=2,  # every 2nd layer NoPE
                     tie_word_embeddings=True),
    "phi3": _spec("Phi3Config", "Phi3ForCausalLM", PHI3, tie_word_embeddings=False),  # fused qkv, gate_up
    "mistral": _spec("MistralConfig", "MistralForCausalLM", MISTRAL, head_dim=16, sliding_window=32,
                     tie_word_embeddings=False),
    "ministral": _spec("MinistralConfig", "MinistralForCausalLM", MISTRAL, head_dim=16, sliding_window=32,
                       layer_types=["sliding_attention", "full_attention"] * 2, tie_word_embeddings=False),
    "olmo2": _spec("Olmo2Config", "Olmo2ForCausalLM", OLMO2, tie_word_embeddings=False),  # post-norms, QK-norm
    "granite": _spec("GraniteConfig", "GraniteForCausalLM", GRANITE, embedding_multiplier=12.0,
                     residual_multiplier=0.22, attention_multiplier=0.0078125, logits_scaling=8.0,
                     tie_word_embeddings=True),
    "gemma3": _spec("Gemma3TextConfig", "Gemma3ForCausalLM", GEMMA, head_dim=16, query_pre_attn_scalar=16,
                    sliding_window=16, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                    tie_word_embeddings=True),
    # Gemma 3 with its SigLIP vision tower and projector (issue 21): the text decoder above, a 2-layer
    # ViT over 64x64 images in 8x8 patches (64 patches, pooled 2x2 by the projector into 16 soft
    # tokens), Gemma's image markers as special tokens, and an image processor config (VISION below).
    "gemma3_vl": {**_spec("Gemma3TextConfig", "Gemma3ForConditionalGeneration", GEMMA_VL, head_dim=16,
                          query_pre_attn_scalar=16, sliding_window=16,
                          layer_types=["sliding_attention"] * 3 + ["full_attention"], tie_word_embeddings=True),
                  "vision": {"config_class": "SiglipVisionConfig", "hidden_size": 32, "intermediate_size": 64,
                             "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 64, "patch_size": 8,
                             "vision_use_head": False},
                  "mm_tokens_per_image": 16},
    "gemma4": _spec("Gemma4TextConfig", "Gemma4ForCausalLM", GEMMA, head_dim=16, sliding_window=16,
                    layer_types=["sliding_attention"] * 3 + ["full_attention"], hidden_size_per_layer_input=8,
                    per_layer_config={}, tie_word_embeddings=True),
    "lfm2": _spec("Lfm2Config", "Lfm2ForCausalLM", layer_types=["conv", "full_attention", "conv", "full_attention"],
                  full_attn_idxs=[1, 3], tie_word_embeddings=True),
    "lfm2_moe": _spec("Lfm2MoeConfig", "Lfm2MoeForCausalLM",
                      layer_types=["conv", "full_attention", "conv", "full_attention"], num_dense_layers=1,
                      num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, tie_word_embeddings=True),
    "exaone4": _spec("Exaone4Config", "Exaone4ForCausalLM", EXAONE, sliding_window=16,
                     layer_types=["sliding_attention"] * 3 + ["full_attention"], tie_word_embeddings=False),
    "cohere2": _spec("Cohere2Config", "Cohere2ForCausalLM", COHERE, head_dim=16, sliding_window=16,
                     layer_types=["sliding_attention"] * 3 + ["full_attention"], tie_word_embeddings=True),
}


def _qwen3_5_layer_types(n: int) -> list[str]:
    return ["linear_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


GRIDS = ("q4_1",)


def q4_1(w: Any) -> Any:
    """w [out, in] moved onto GGUF Q4_1's grid (in a multiple of 32), as llama.cpp quantizes and
    dequantizes it: per block min m and step d = (max - min) / 15, both float16."""
    import numpy as np

    out, inn = w.shape
    blk = np.asarray(w, dtype=np.float32).reshape(out, inn // 32, 32)
    lo, hi = blk.min(-1, keepdims=True), blk.max(-1, keepdims=True)
    d = ((hi - lo) / 15).astype(np.float16).astype(np.float32)
    m = lo.astype(np.float16).astype(np.float32)
    k = np.clip(np.rint((blk - m) / np.where(d > 0, d, 1)), 0, 15)
    return (d * k + m).reshape(out, inn).astype(np.float32)


def _parse(request: dict[str, Any]) -> tuple[str, dict[str, Any], int, int, Path]:
    family = request.get("family")
    if family not in FAMILIES:
        raise BadInput(f"unknown family {family!r}: use one of {sorted(FAMILIES)}")
    overrides = request.get("config") or {}
    if not isinstance(overrides, dict):
        raise BadInput("config must be an object of transformers config overrides")
    seed = request.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BadInput(f"seed must be a non-negative integer, got {seed!r}")
    tok = request.get("tokenizer") or {}
    vocab_size = tok.get("vocab_size", 512) if isinstance(tok, dict) else None
    least = 256 + len(_chat(FAMILIES[family])[0]) + 1
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < least:
        raise BadInput(
            f"tokenizer.vocab_size must be an integer >= {least} (256 bytes + "
            f"{least - 257} special tokens + 1), "
            f"got {vocab_size!r}"
        )
    out = request.get("output_dir")
    if not isinstance(out, str) or not out:
        raise BadInput("output_dir is required: the folder to write the model into")
    return family, overrides, seed, vocab_size, Path(out).expanduser().resolve()


def _chat(spec: dict[str, Any]) -> tuple[tuple[str, ...], str, str]:
    """(special tokens, end-of-turn token, chat template) of an architecture (ChatML by default)."""
    return (spec.get("special_tokens", SPECIAL_TOKENS), spec.get("end_of_turn", EOS),
            spec.get("chat_template", CHAT_TEMPLATE))


def _train_tokenizer(vocab_size: int, specials: tuple[str, ...] = SPECIAL_TOKENS, split: str | None = None):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    if split is None:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)
    tokenizer.train_from_iterator(lines, trainer=trainer, length=len(lines))
    got = tokenizer.get_vocab_size()
    if got != vocab_size:
        raise BadInput(
            f"tokenizer.vocab_size {vocab_size} is more than the shipped corpus can train "
            f"(it gave {got}): use a vocab_size <= {got}"
        )
    return tokenizer


def _build(family: str, overrides: dict[str, Any], seed: int, vocab_size: int, out: Path,
           weights_grid: str | None = None) -> dict[str, Any]:
    import torch
    import transformers

    spec = FAMILIES[family]
    specials, eos, template = _chat(spec)
    pad = specials[0]
    protocol.progress(f"training byte-level BPE tokenizer (vocab {vocab_size})")
    tokenizer = _train_tokenizer(vocab_size, specials, spec.get("split"))
    ids = {t: tokenizer.token_to_id(t) for t in specials}

    config_cls = getattr(transformers, spec["config_class"])
    known = set(config_cls().to_dict())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise BadInput(f"unknown {spec['config_class']} field(s) {unknown}: check the spelling")
    kwargs: dict[str, Any] = {
        **spec["defaults"],
        "vocab_size": vocab_size,
        "bos_token_id": None,
        "eos_token_id": ids[eos],
        "pad_token_id": ids[pad],
        **overrides,
    }
    if "vocab_size_per_layer_input" in known and "vocab_size_per_layer_input" not in overrides:
        kwargs["vocab_size_per_layer_input"] = kwargs["vocab_size"]  # Gemma 4's per-layer embeddings
    if family == "qwen3_5" and "layer_types" not in overrides:
        kwargs["layer_types"] = _qwen3_5_layer_types(kwargs["num_hidden_layers"])
    if kwargs["vocab_size"] < vocab_size:
        raise BadInput(f"config.vocab_size {kwargs['vocab_size']} is smaller than the tokenizer's {vocab_size}")
    try:
        config = config_cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - transformers raises ValueError, TypeError, or
        # huggingface_hub's StrictDataclassClassValidationError, whose detail is on later lines.
        detail = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:300]
        raise BadInput(f"invalid {spec['config_class']} overrides: {detail}") from exc
    if "vision" in spec:
        config = _with_vision(transformers, spec, config, ids)
    config.architectures = [spec["model_class"]]
    if family == "qwen3_5" and config.linear_num_key_heads != config.linear_num_value_heads:
        protocol.progress(
            "warning: linear_num_key_heads != linear_num_value_heads; the fused GDN export is known to "
            "diverge from PyTorch for such models (export with use_fused_gdn=false)"
        )

    protocol.progress(f"initializing {spec['model_class']} with seed {seed}")
    torch.manual_seed(seed)
    model = getattr(transformers, spec["model_class"])(config).eval()
    if "vision" in spec:
        # transformers starts Gemma 3's projector at zero (a trained model learns it): the images
        # would not reach the answers, and no image gate could tell one image from another.
        proj = model.model.multi_modal_projector.mm_input_projection_weight
        with torch.no_grad():
            proj.copy_(torch.randn_like(proj) * config.initializer_range)
            # The end-of-turn row (tied: input and output) made 8x longer, so replies end with the
            # stop token within a few tokens, as a trained model's do (a random one never stops):
            # the second-turn gate checks what the runtime does with that token.
            model.get_input_embeddings().weight[ids[eos]] *= 8
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=None, eos_token_id=ids[eos], pad_token_id=ids[pad]
    )
    if weights_grid == "q4_1":
        tied = model.get_input_embeddings().weight
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.weight is not tied:
                if module.in_features % 32:
                    raise BadInput(f"weights_grid q4_1 needs linear inputs in multiples of 32; a layer has "
                                   f"{module.in_features}")
                module.weight.data = torch.from_numpy(q4_1(module.weight.detach().numpy()))
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out, safe_serialization=True)

    tokenizer.save(str(out / "tokenizer.json"))
    model_folder.write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": None,
            "eos_token": eos,
            "pad_token": pad,
            "unk_token": None,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": config.get_text_config().max_position_embeddings,
            "added_tokens_decoder": {
                str(ids[t]): {
                    "content": t,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                }
                for t in specials
            },
        },
    )
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    if "vision" in spec:
        _write_image_processor(out, spec)
    return {"params": params, "architecture": spec["model_class"]}


def _with_vision(transformers: Any, spec: dict[str, Any], text: Any, ids: dict[str, int]) -> Any:
    """The text config wrapped with the vision tower's config and the image markers' ids."""
    vision = {k: v for k, v in spec["vision"].items() if k != "config_class"}
    boi, eoi, image = IMAGE_MARKERS
    return transformers.Gemma3Config(
        text_config=text.to_dict(), vision_config=getattr(transformers, spec["vision"]["config_class"])(**vision).to_dict(),
        mm_tokens_per_image=spec["mm_tokens_per_image"], boi_token_index=ids[boi], eoi_token_index=ids[eoi],
        image_token_index=ids[image], tie_word_embeddings=text.tie_word_embeddings,
        initializer_range=text.initializer_range)


def _write_image_processor(out: Path, spec: dict[str, Any]) -> None:
    """Gemma 3's image processor at the tower's size (resize, scale to [0, 1], normalize to [-1, 1]),
    the processor's soft-token count, and the image markers by name (what litert-torch's adapter
    and metadata builder read from the tokenizer)."""
    size = spec["vision"]["image_size"]
    model_folder.write_json(out / "preprocessor_config.json", {
        "image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
        "do_resize": True, "size": {"height": size, "width": size}, "resample": 2, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True, "do_pan_and_scan": False})
    model_folder.write_json(out / "processor_config.json", {
        "processor_class": "Gemma3Processor", "image_seq_length": spec["mm_tokens_per_image"]})
    cfg_path = out / "tokenizer_config.json"
    import json

    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    boi, eoi, image = IMAGE_MARKERS
    cfg["extra_special_tokens"] = {"boi_token": boi, "eoi_token": eoi, "image_token": image}
    model_folder.write_json(cfg_path, cfg)


# RAYON_NUM_THREADS=1 (the commands' quiet defaults) before tokenizers starts its pool: the BPE
# trainer is deterministic only single-threaded.
@COMMANDS.register("make_model", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    family, overrides, seed, vocab_size, out = _parse(request)
    grid = request.get("weights_grid")
    if grid is not None and grid not in GRIDS:
        raise BadInput(f"weights_grid {grid!r}: use one of {', '.join(GRIDS)} or leave it out")
    return model_folder.publish(out, lambda tmp: _build(family, overrides, seed, vocab_size, tmp, grid))
