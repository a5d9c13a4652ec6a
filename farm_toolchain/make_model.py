"""`make_model`: a seeded tiny test model written as an ordinary Hugging Face folder.

Request:
    {"family": "qwen3_5" | "llama", "config": {transformers config overrides}, "seed": int,
     "tokenizer": {"vocab_size": int}, "output_dir": str, "weights_grid": null | "q4_1"}
Result:
    {"output_dir", "files": [sorted relative names], "params": int, "architecture": str}

The folder holds config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json and chat_template.jinja. The tokenizer is a byte-level BPE trained here on
farm_toolchain/data/tokenizer_corpus.txt with special tokens <|endoftext|> (0, pad), <|im_start|> (1)
and <|im_end|> (2, eos); no bos. The ChatML template accepts message content as a string or as a list
of content parts ({"type": "text", "text": ...}), which is what litert-lm 0.18 passes.

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
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 260:
        raise BadInput(
            f"tokenizer.vocab_size must be an integer >= 260 (256 bytes + 3 special tokens + 1), "
            f"got {vocab_size!r}"
        )
    out = request.get("output_dir")
    if not isinstance(out, str) or not out:
        raise BadInput("output_dir is required: the folder to write the model into")
    return family, overrides, seed, vocab_size, Path(out).expanduser().resolve()


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
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
    protocol.progress(f"training byte-level BPE tokenizer (vocab {vocab_size})")
    tokenizer = _train_tokenizer(vocab_size)
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}

    config_cls = getattr(transformers, spec["config_class"])
    known = set(config_cls().to_dict())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise BadInput(f"unknown {spec['config_class']} field(s) {unknown}: check the spelling")
    kwargs: dict[str, Any] = {
        **spec["defaults"],
        "vocab_size": vocab_size,
        "bos_token_id": None,
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
        **overrides,
    }
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
    config.architectures = [spec["model_class"]]
    if family == "qwen3_5" and config.linear_num_key_heads != config.linear_num_value_heads:
        protocol.progress(
            "warning: linear_num_key_heads != linear_num_value_heads; the fused GDN export is known to "
            "diverge from PyTorch for such models (export with use_fused_gdn=false)"
        )

    protocol.progress(f"initializing {spec['model_class']} with seed {seed}")
    torch.manual_seed(seed)
    model = getattr(transformers, spec["model_class"])(config).eval()
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=None, eos_token_id=ids[EOS], pad_token_id=ids[PAD]
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
            "eos_token": EOS,
            "pad_token": PAD,
            "unk_token": None,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": config.max_position_embeddings,
            "added_tokens_decoder": {
                str(ids[t]): {
                    "content": t,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                }
                for t in SPECIAL_TOKENS
            },
        },
    )
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    return {"params": params, "architecture": spec["model_class"]}


# RAYON_NUM_THREADS=1 (the commands' quiet defaults) before tokenizers starts its pool: the BPE
# trainer is deterministic only single-threaded.
@COMMANDS.register("make_model", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    family, overrides, seed, vocab_size, out = _parse(request)
    grid = request.get("weights_grid")
    if grid is not None and grid not in GRIDS:
        raise BadInput(f"weights_grid {grid!r}: use one of {', '.join(GRIDS)} or leave it out")
    return model_folder.publish(out, lambda tmp: _build(family, overrides, seed, vocab_size, tmp, grid))
