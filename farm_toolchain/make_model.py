"""`make_model`: a seeded tiny test model written as an ordinary Hugging Face folder.

Request:
    {"family": the family's name (for the record), "spec": its tiny model (farm_common/tiny_model.py
     TinySpec, which the family module declares: farm/families/<family>.py `tiny`),
     "config": {transformers config overrides}, "seed": int,
     "tokenizer": {"vocab_size": int}, "output_dir": str, "weights_grid": null | "q4_1"}
Result:
    {"output_dir", "files": [sorted relative names], "params": int, "architecture": str}

The folder holds config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json and chat_template.jinja. The tokenizer is a byte-level BPE trained here on
farm_toolchain/data/tokenizer_corpus.txt with the spec's chat special tokens first (pad first: ChatML's
<|endoftext|> (0, pad), <|im_start|> (1) and <|im_end|> (2, eos); Gemma's, Phi-3's, … markers), the
end-of-turn token as eos; no bos. The toolchain knows no family: what differs per architecture is
the spec's. The template, in the architecture's own turn format, accepts message content as
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

from pydantic import ValidationError

from farm_common.tiny_model import TinySpec
from farm_toolchain import model_folder, protocol
from farm_toolchain.commands import COMMANDS, OFFLINE
from farm_toolchain.protocol import BadInput

CORPUS = Path(__file__).with_name("data") / "tokenizer_corpus.txt"

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


def _parse(request: dict[str, Any]) -> tuple[TinySpec, dict[str, Any], int, int, Path]:
    family = request.get("family")
    if not isinstance(family, str) or not family:
        raise BadInput("family is required: the family's name")
    try:
        spec = TinySpec.model_validate(request.get("spec"))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"spec of {family}'s tiny model: {'.'.join(str(x) for x in err['loc']) or 'spec'}: "
                       f"{err['msg']} (the family module's `tiny`)") from None
    overrides = request.get("config") or {}
    if not isinstance(overrides, dict):
        raise BadInput("config must be an object of transformers config overrides")
    seed = request.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BadInput(f"seed must be a non-negative integer, got {seed!r}")
    tok = request.get("tokenizer") or {}
    vocab_size = tok.get("vocab_size", 512) if isinstance(tok, dict) else None
    least = 256 + len(spec.special_tokens) + 1
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < least:
        raise BadInput(
            f"tokenizer.vocab_size must be an integer >= {least} (256 bytes + "
            f"{least - 257} special tokens + 1), "
            f"got {vocab_size!r}"
        )
    out = request.get("output_dir")
    if not isinstance(out, str) or not out:
        raise BadInput("output_dir is required: the folder to write the model into")
    return spec, overrides, seed, vocab_size, Path(out).expanduser().resolve()


def _train_tokenizer(vocab_size: int, specials: tuple[str, ...], split: str | None = None):
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


def _build(spec: TinySpec, overrides: dict[str, Any], seed: int, vocab_size: int, out: Path,
           weights_grid: str | None = None) -> dict[str, Any]:
    import torch
    import transformers

    specials, eos, template = spec.special_tokens, spec.end_of_turn, spec.chat_template
    pad = specials[0]
    protocol.progress(f"training byte-level BPE tokenizer (vocab {vocab_size})")
    tokenizer = _train_tokenizer(vocab_size, specials, spec.split)
    ids = {t: tokenizer.token_to_id(t) for t in specials}

    config_cls = getattr(transformers, spec.config_class)
    known = set(config_cls().to_dict())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise BadInput(f"unknown {spec.config_class} field(s) {unknown}: check the spelling")
    kwargs: dict[str, Any] = {
        **spec.defaults,
        "vocab_size": vocab_size,
        "bos_token_id": None,
        "eos_token_id": ids[eos],
        "pad_token_id": ids[pad],
        **overrides,
    }
    if "vocab_size_per_layer_input" in known and "vocab_size_per_layer_input" not in overrides:
        kwargs["vocab_size_per_layer_input"] = kwargs["vocab_size"]  # Gemma 4's per-layer embeddings
    if spec.layer_pattern and "layer_types" not in overrides:
        n, pattern = kwargs["num_hidden_layers"], spec.layer_pattern
        kwargs["layer_types"] = [pattern[i % len(pattern)] for i in range(n)]
    if kwargs["vocab_size"] < vocab_size:
        raise BadInput(f"config.vocab_size {kwargs['vocab_size']} is smaller than the tokenizer's {vocab_size}")
    try:
        config = config_cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - transformers raises ValueError, TypeError, or
        # huggingface_hub's StrictDataclassClassValidationError, whose detail is on later lines.
        detail = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:300]
        raise BadInput(f"invalid {spec.config_class} overrides: {detail}") from exc
    if spec.vision:
        config = _with_vision(transformers, spec, config, ids)
    config.architectures = [spec.model_class]
    if spec.warn_if_unequal:
        a, b, why = spec.warn_if_unequal
        if getattr(config, a, None) != getattr(config, b, None):
            protocol.progress(f"warning: {a} != {b}; {why}")

    protocol.progress(f"initializing {spec.model_class} with seed {seed}")
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(config).eval()
    if spec.vision:
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
    if spec.vision:
        _write_image_processor(out, spec)
    return {"params": params, "architecture": spec.model_class}


def _with_vision(transformers: Any, spec: TinySpec, text: Any, ids: dict[str, int]) -> Any:
    """The text config wrapped with the vision tower's config and the image markers' ids (the
    Gemma 3 image-text layout: the one image-text family the farm makes tiny)."""
    vision = {k: v for k, v in spec.vision.items() if k != "config_class"}
    boi, eoi, image = spec.image_markers
    return transformers.Gemma3Config(
        text_config=text.to_dict(), vision_config=getattr(transformers, spec.vision["config_class"])(**vision).to_dict(),
        mm_tokens_per_image=spec.mm_tokens_per_image, boi_token_index=ids[boi], eoi_token_index=ids[eoi],
        image_token_index=ids[image], tie_word_embeddings=text.tie_word_embeddings,
        initializer_range=text.initializer_range)


def _write_image_processor(out: Path, spec: TinySpec) -> None:
    """Gemma 3's image processor at the tower's size (resize, scale to [0, 1], normalize to [-1, 1]),
    the processor's soft-token count, and the image markers by name (what litert-torch's adapter
    and metadata builder read from the tokenizer)."""
    size = spec.vision["image_size"]
    model_folder.write_json(out / "preprocessor_config.json", {
        "image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
        "do_resize": True, "size": {"height": size, "width": size}, "resample": 2, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True, "do_pan_and_scan": False})
    model_folder.write_json(out / "processor_config.json", {
        "processor_class": "Gemma3Processor", "image_seq_length": spec.mm_tokens_per_image})
    cfg_path = out / "tokenizer_config.json"
    import json

    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    boi, eoi, image = spec.image_markers
    cfg["extra_special_tokens"] = {"boi_token": boi, "eoi_token": eoi, "image_token": image}
    model_folder.write_json(cfg_path, cfg)


# RAYON_NUM_THREADS=1 (the commands' quiet defaults) before tokenizers starts its pool: the BPE
# trainer is deterministic only single-threaded.
@COMMANDS.register("make_model", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    spec, overrides, seed, vocab_size, out = _parse(request)
    grid = request.get("weights_grid")
    if grid is not None and grid not in GRIDS:
        raise BadInput(f"weights_grid {grid!r}: use one of {', '.join(GRIDS)} or leave it out")
    return model_folder.publish(out, lambda tmp: _build(spec, overrides, seed, vocab_size, tmp, grid))
