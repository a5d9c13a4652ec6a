"""package: build a reproducible .litertlm bundle from an HF folder and a (quantized) .tflite.

Request:
    {"model_dir": HF folder (config.json, tokenizer.json, tokenizer_config.json, chat template,
                  generation_config.json),
     "tflite_path": the prefill/decode .tflite, "output_path": the .litertlm to write,
     "prefill_lengths": [int], "cache_length": int,
     "reproducible_seed": hex string (>= 32 hex digits, e.g. the stage's cache key),
     optional "creation_timestamp": ISO 8601 string (default "1970-01-01T00:00:00+00:00"),
     optional "end_of_turn": the chat end-of-turn token (e.g. "<|im_end|>"); derived from the chat
               template when absent,
     optional "llm_model_type": the LlmModelType the runtime must see for this family (e.g.
               "gemma4"); when the builder wrote another one it is set, and said in "fixes",
     optional "parts": {"embedder"|"vision_encoder"|"vision_adapter": .tflite path} — an image
               model's other sections (farm_toolchain/vision_export.py), added after the decoder in
               that order, each verified byte for byte, with "image": {"height", "width"}: the LLM
               metadata's image contract and markers (Gemma 3: the gemma3n model type with
               <start_of_image>/<end_of_image>, as litert-torch's model_ext/gemma3/metadata_builder.py),
     optional "craft": {"stop_tokens": [id | [ids] | str], "chat_template": str,
               "drop_executor_metadata": true, "llm_model_type": str} — a bundle with a known defect,
               for the gates' negative controls (tests); the farm's stages never send it}
Result:
    {"output_path", "stop_tokens": [int ids and strings, in bundle order], "start_token",
     "end_of_turn": {"token", "id"} | null, "has_executor_metadata", "uuid", "creation_timestamp",
     "sections": [{"type", "offset", "size"}], "llm_model_type", "fixes": [one line per defect of the
     builder's metadata that was fixed], "seconds"}

The sequence is litert-torch 0.10.0's own `package_model`
(litert_torch/generative/export_hf/core/litert_lm_builder.py): LLM metadata from its
`build_llm_metadata`, executor metadata (state buffers) from `model_ext/metadata_builder.py`
`build_executor_metadata`, then LitertLmFileBuilder: system metadata Authors=ODML,
add_llm_metadata, add_executor_metadata, add_hf_tokenizer, add_tflite_model(PREFILL_DECODE), build.
It runs on a light stand-in for the model (its config and generation config), so no weights load.

What differs from litert-torch, and why:
- Tokenizer: the source folder's own tokenizer.json bytes (litert-torch re-saves the tokenizer
  through transformers, which can rewrite it). `add_hf_tokenizer` stores the file's bytes as an
  8-byte little-endian size + zlib (litertlm_builder.py:1178-1184); the section is decompressed and
  compared with the source after the build.
- Stop tokens: litert-torch collects them in a Python set (order follows PYTHONHASHSEED); here they
  are sorted (token ids ascending, then strings), the chat end-of-turn token's id is added if the
  set lacks it, and a stop token that is only whitespace (a model's newline token declared as a
  stop token, LiteRT-LM #950: every reply would end at its first line break) is dropped. Each
  addition or removal is a fix, reported in "fixes" (the farm records them and the card says so).
- Model type: the builder maps config.model_type to an LlmModelType and writes generic_model for any
  it does not know (litert-torch #1005: a gemma4 bundle that the runtime rejects); the family's own
  type, when the request names one, replaces it (a fix).
- Reproducible system metadata: `LitertLmFileBuilder._build_sections` (litertlm_builder.py:1295)
  calls the module function `populate_system_metadata` (litertlm_builder.py:180-208), which drops any
  given "uuid"/"creation_timestamp" and appends uuid.uuid4() and datetime.now(). During our build
  that module attribute is replaced by a function that appends uuid.UUID(hex=seed[:32]) and the
  request's creation_timestamp (default the Unix epoch, the SOURCE_DATE_EPOCH=0 convention: the
  bundle records no wall-clock time; the lineage DB records when it was built). Both are read back
  from the written header and must match.
- Atomic: written to a temp file beside output_path, verified, fsynced, then renamed over it.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import re
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

from farm_toolchain import protocol
from farm_toolchain.commands import COMMANDS, OFFLINE

DEFAULT_TIMESTAMP = "1970-01-01T00:00:00+00:00"


# The model folder is local, never the hub.
@COMMANDS.register("package", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    req = _parse_request(request)
    signatures = _read_signatures(req["tflite_path"])
    _check_signatures(signatures, req["prefill_lengths"])

    from farm_toolchain import compat

    compat.ensure_litert_torch_importable()
    import litert_lm_builder
    from litert_lm_builder import litertlm_builder
    from litert_torch.generative.export_hf.core import (
        export_lib,
        exportable_module_config,
    )
    from litert_torch.generative.export_hf.core import litert_lm_builder as lt_builder
    from litert_torch.generative.export_hf.model_ext import metadata_builder

    source = _load_source(req["model_dir"], export_lib)
    export_config = exportable_module_config.ExportableModuleConfig(
        model=str(req["model_dir"]),
        prefill_lengths=list(req["prefill_lengths"]),
        cache_length=req["cache_length"],
        quantization_recipe="none",
    )
    _check_cache_length(signatures, req["cache_length"], export_config)
    _check_vocab(signatures, source)

    tokenizer = source.tokenizer
    # package_model with the default use_jinja_template=True ships the tokenizer's jinja template.
    chat_template = getattr(tokenizer, "chat_template", None) or ""
    if not chat_template:
        protocol.progress("WARNING: the tokenizer has no chat template; the bundle gets an empty one")
    llm_metadata = lt_builder.build_llm_metadata(
        source, export_config, chat_template, export_lib.ExportedModelArtifacts(), None
    )
    _drop_start_token_the_template_already_renders(llm_metadata, tokenizer, chat_template)
    end_of_turn = _end_of_turn(tokenizer, req.get("end_of_turn"), lt_builder)
    fixes = _normalize_stop_tokens(llm_metadata, end_of_turn, tokenizer)
    if "vision_encoder" in req["parts"]:  # before the type check: the image type is not a fix
        _image_metadata(llm_metadata, source, req["image"])
    fixes += _fix_model_type(llm_metadata, req.get("llm_model_type"))
    craft = req["craft"]
    if "stop_tokens" in craft:
        del llm_metadata.stop_tokens[:]
        for value in craft["stop_tokens"]:
            tu = llm_metadata.stop_tokens.add()
            if isinstance(value, str):
                tu.token_str = value
            else:
                tu.token_ids.ids.extend(value if isinstance(value, list) else [value])
    if "chat_template" in craft:
        llm_metadata.jinja_prompt_template = craft["chat_template"]
    if "llm_model_type" in craft:
        _set_model_type(llm_metadata, craft["llm_model_type"])

    executor_builder = metadata_builder.get_executor_metadata_builder(source.model_config)
    executor_metadata = None
    if executor_builder is not None:
        executor_metadata = executor_builder(source, export_config, export_lib.ExportedModelArtifacts())
        _check_state_buffers(executor_metadata, signatures)
    if craft.get("drop_executor_metadata"):
        executor_metadata = None

    tokenizer_json = req["model_dir"] / "tokenizer.json"
    _warn_if_litert_torch_would_patch(tokenizer_json)
    seed_uuid = str(uuid.UUID(hex=req["reproducible_seed"][:32]))
    stamp = req["creation_timestamp"]

    dst: Path = req["output_path"]
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    try:
        with tempfile.TemporaryDirectory(prefix="farm-package-") as work:
            llm_path = Path(work, "llm_metadata.pb")
            llm_path.write_bytes(llm_metadata.SerializeToString(deterministic=True))
            builder = litert_lm_builder.LitertLmFileBuilder()
            builder.add_system_metadata(
                litert_lm_builder.Metadata(key="Authors", value="ODML", dtype=litert_lm_builder.DType.STRING)
            )
            builder.add_llm_metadata(str(llm_path))
            if executor_metadata is not None:
                exec_path = Path(work, "executor_metadata.pb")
                exec_path.write_bytes(executor_metadata.SerializeToString(deterministic=True))
                builder.add_executor_metadata(str(exec_path))
            builder.add_hf_tokenizer(str(tokenizer_json))
            builder.add_tflite_model(str(req["tflite_path"]), litert_lm_builder.TfLiteModelType.PREFILL_DECODE)
            for role in PART_ORDER:
                if role in req["parts"]:
                    builder.add_tflite_model(str(req["parts"][role]),
                                             getattr(litert_lm_builder.TfLiteModelType, PART_ORDER[role]))
            with _fixed_system_metadata(litertlm_builder, seed_uuid, stamp), open(tmp, "wb") as f:
                builder.build(f)
                f.flush()
                os.fsync(f.fileno())
        sections, system = _read_back(tmp)
        _verify(tmp, sections, system, tokenizer_json,
                [req["tflite_path"], *(req["parts"][r] for r in PART_ORDER if r in req["parts"])], seed_uuid, stamp)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()

    return {
        "output_path": str(dst),
        "stop_tokens": [_token_value(t) for t in llm_metadata.stop_tokens],
        "start_token": _token_value(llm_metadata.start_token) if llm_metadata.HasField("start_token") else None,
        "end_of_turn": end_of_turn,
        "has_executor_metadata": any(s["type"] == "ExecutorMetadataProto" for s in sections),
        "uuid": seed_uuid,
        "creation_timestamp": stamp,
        "sections": sections,
        "llm_model_type": llm_metadata.llm_model_type.WhichOneof("model_type"),
        "fixes": fixes,
        "seconds": round(time.monotonic() - started, 3),
    }


# --- request -------------------------------------------------------------------------------------


def _parse_request(request: dict[str, Any]) -> dict[str, Any]:
    for key in ("model_dir", "tflite_path", "output_path", "prefill_lengths", "cache_length", "reproducible_seed"):
        if key not in request:
            raise protocol.BadInput(f"package request is missing {key!r}")
    model_dir = Path(request["model_dir"])
    if not model_dir.is_dir():
        raise protocol.BadInput(f"model_dir {str(model_dir)!r} is not a folder")
    for name in ("config.json", "tokenizer.json"):
        if not (model_dir / name).is_file():
            raise protocol.BadInput(
                f"model_dir {str(model_dir)!r} has no {name}: the bundle carries the source folder's own "
                "tokenizer.json, so the folder must hold one (a tokenizer.model-only checkpoint is not supported)"
                if name == "tokenizer.json"
                else f"model_dir {str(model_dir)!r} has no config.json: pass an HF model folder"
            )
    tflite = Path(request["tflite_path"])
    if not tflite.is_file():
        raise protocol.BadInput(f"tflite_path {str(tflite)!r} is not a file")
    with tflite.open("rb") as f:
        if f.read(8)[4:8] != b"TFL3":
            raise protocol.BadInput(f"tflite_path {str(tflite)!r} is not a TFLite flatbuffer (no TFL3 identifier)")
    out = Path(request["output_path"])
    if not out.parent.is_dir():
        raise protocol.BadInput(f"output_path's folder {str(out.parent)!r} does not exist")
    prefill = request["prefill_lengths"]
    if isinstance(prefill, int):
        prefill = [prefill]
    if not isinstance(prefill, list) or not prefill or not all(isinstance(n, int) and n > 0 for n in prefill):
        raise protocol.BadInput("prefill_lengths must be a non-empty list of positive integers")
    cache = request["cache_length"]
    if not isinstance(cache, int) or cache <= 0:
        raise protocol.BadInput("cache_length must be a positive integer")
    seed = request["reproducible_seed"]
    if not isinstance(seed, str) or not re.fullmatch(r"[0-9a-fA-F]{32,}", seed):
        raise protocol.BadInput("reproducible_seed must be a hex string of at least 32 digits (e.g. a sha256)")
    stamp = request.get("creation_timestamp") or DEFAULT_TIMESTAMP
    try:
        datetime.datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        raise protocol.BadInput(f"creation_timestamp {stamp!r} is not an ISO 8601 date-time") from None
    eot = request.get("end_of_turn")
    if eot is not None and (not isinstance(eot, str) or not eot):
        raise protocol.BadInput("end_of_turn must be a non-empty token string")
    model_type = request.get("llm_model_type")
    if model_type is not None and model_type not in MODEL_TYPES:
        raise protocol.BadInput(f"llm_model_type {model_type!r} is not an LlmModelType: use one of {', '.join(MODEL_TYPES)}")
    parts = request.get("parts") or {}
    if not isinstance(parts, dict) or set(parts) - set(PART_ORDER):
        raise protocol.BadInput(f"parts must be an object with {', '.join(PART_ORDER)}")
    for role, path in parts.items():
        if not Path(path).is_file():
            raise protocol.BadInput(f"parts.{role} {str(path)!r} is not a file")
    image = request.get("image")
    if "vision_encoder" in parts and not (isinstance(image, dict) and isinstance(image.get("height"), int)
                                          and isinstance(image.get("width"), int)):
        raise protocol.BadInput("a vision_encoder part needs image: {height, width} (the encoder's static size)")
    craft = request.get("craft") or {}
    crafts = {"stop_tokens", "chat_template", "drop_executor_metadata", "llm_model_type"}
    if not isinstance(craft, dict) or set(craft) - crafts:
        raise protocol.BadInput(f"craft must be an object with {', '.join(sorted(crafts))}")
    return {
        "model_dir": model_dir,
        "tflite_path": tflite,
        "output_path": out,
        "prefill_lengths": sorted(set(prefill)),
        "cache_length": cache,
        "reproducible_seed": seed.lower(),
        "creation_timestamp": stamp,
        "end_of_turn": eot,
        "llm_model_type": model_type,
        "parts": {role: Path(path) for role, path in parts.items()},
        "image": image,
        "craft": craft,
    }


# --- the .tflite's signatures --------------------------------------------------------------------


def _read_signatures(path: Path) -> dict[str, dict[str, dict[str, list[int]]]]:
    """{signature key: {"inputs": {name: shape}, "outputs": {name: shape}}}, read over an mmap."""
    import mmap

    from farm_toolchain.tflite import signatures_at

    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return signatures_at(buf)


def _check_signatures(signatures: dict[str, Any], prefill_lengths: list[int]) -> None:
    have = sorted(signatures)
    if "decode" not in signatures:
        raise protocol.BadInput(f"the .tflite has no 'decode' signature (it has {', '.join(have) or 'none'})")
    missing = [n for n in prefill_lengths if f"prefill_{n}" not in signatures]
    if missing:
        raise protocol.BadInput(
            f"the .tflite has no prefill_{missing[0]} signature (it has {', '.join(have)}): "
            "prefill_lengths must be the ones it was exported with"
        )


def _check_cache_length(signatures, cache_length: int, export_config) -> None:
    """The KV caches' time axis must be cache_length: the runtime sizes its buffers from metadata."""
    for name, shape in signatures["decode"]["inputs"].items():
        if name.startswith("kv_cache_k_") and len(shape) > export_config.k_ts_idx:
            if shape[export_config.k_ts_idx] != cache_length:
                raise protocol.BadInput(
                    f"cache_length {cache_length} does not match the .tflite: decode input {name} has shape "
                    f"{shape} (time axis {export_config.k_ts_idx} = {shape[export_config.k_ts_idx]})"
                )


def _check_vocab(signatures, source) -> None:
    """The decode logits must cover the model's vocabulary and the tokenizer's ids."""
    logits = signatures["decode"]["outputs"].get("logits")
    if not logits:
        raise protocol.BadInput("the .tflite's decode signature has no 'logits' output")
    vocab = logits[-1]
    want = getattr(source.text_model_config, "vocab_size", None)
    if want is not None and want != vocab:
        raise protocol.BadInput(
            f"the .tflite's decode logits have {vocab} entries but config.json says vocab_size {want}: "
            "is this .tflite exported from this model_dir?"
        )
    if len(source.tokenizer) > vocab:
        raise protocol.BadInput(f"the tokenizer has {len(source.tokenizer)} tokens, more than the model's {vocab} logits")


def _check_state_buffers(executor_metadata, signatures) -> None:
    names = set(signatures["decode"]["inputs"])
    for buf in executor_metadata.llm_executor_metadata.state_buffers:
        if buf.decode_input_name not in names:
            raise protocol.BadInput(
                f"the model config implies state tensor {buf.decode_input_name!r}, which the .tflite's decode "
                "signature lacks: is this .tflite exported from this model_dir?"
            )


# --- source model and metadata -------------------------------------------------------------------


def _load_source(model_dir: Path, export_lib):
    """The parts of litert-torch's SourceModelArtifacts that packaging reads, without the weights."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(model_dir))
    try:
        gen = transformers.GenerationConfig.from_pretrained(str(model_dir))
    except OSError:  # no generation_config.json: what from_pretrained(model) would have made
        gen = transformers.GenerationConfig.from_model_config(config)
    # export_lib.load_model sets these for TEXT_GENERATION; do_sample=False keeps sampler params out.
    gen.cache_implementation = "static"
    gen.do_sample = False
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = SimpleNamespace(config=config, generation_config=gen)
    return export_lib.SourceModelArtifacts(
        model=model,
        model_config=config,
        text_model_config=getattr(config, "text_config", config),
        tokenizer=tokenizer,
    )


def _end_of_turn(tokenizer, requested: str | None, lt_builder) -> dict[str, Any] | None:
    """The chat end-of-turn token: the requested one, else the first token of the model turn's
    suffix in the chat template (ChatML: "<|im_end|>\\n" -> "<|im_end|>") when it is a special token."""
    if requested is not None:
        tid = tokenizer.convert_tokens_to_ids(requested)
        if tid is None or (tokenizer.unk_token_id is not None and tid == tokenizer.unk_token_id):
            raise protocol.BadInput(f"end_of_turn {requested!r} is not a token of this tokenizer")
        return {"token": requested, "id": int(tid)}
    parsed = lt_builder.parse_chat_template(tokenizer)
    if not parsed or parsed[2][1] is None:
        return None
    suffix = parsed[2][1]
    ids = tokenizer(suffix, add_special_tokens=False).input_ids
    if not ids:
        return None
    token = tokenizer.convert_ids_to_tokens(ids[0])
    special = set(tokenizer.all_special_tokens) | {
        t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if getattr(t, "special", False)
    }
    if token not in special or not suffix.startswith(token):
        return None
    return {"token": token, "id": int(ids[0])}


def _normalize_stop_tokens(llm_metadata, end_of_turn: dict[str, Any] | None, tokenizer=None) -> list[str]:
    """Sorted stop tokens (ids ascending, then strings), with the end-of-turn id present and none
    that is only whitespace; what was added or dropped, one line each."""
    fixes: list[str] = []
    entries = []
    for t in llm_metadata.stop_tokens:
        if t.HasField("token_ids"):
            entries.append((0, tuple(t.token_ids.ids), ""))
        else:
            entries.append((1, (), t.token_str))
    blank = [e for e in entries if _whitespace_only(e, tokenizer)]
    if blank:
        entries = [e for e in entries if e not in blank]
        shown = ", ".join(f"ids {list(ids)} ({tokenizer.decode(list(ids))!r})" if kind == 0 else repr(text)
                          for kind, ids, text in blank)
        fixes.append(f"stop token(s) {shown} dropped: a stop token that is only whitespace ends every reply at "
                     "its first line break (LiteRT-LM #950)")
    if end_of_turn is not None:
        has_id = any(kind == 0 and ids == (end_of_turn["id"],) for kind, ids, _ in entries)
        has_str = any(kind == 1 and s == end_of_turn["token"] for kind, _, s in entries)
        if not (has_id or has_str):
            entries.append((0, (end_of_turn["id"],), ""))
            fixes.append(f"the end-of-turn token {end_of_turn['token']} (id {end_of_turn['id']}) added to the stop "
                         "tokens: the builder's set lacked it, so replies would run past the end of the turn")
    del llm_metadata.stop_tokens[:]
    for kind, ids, s in sorted(set(entries)):
        tu = llm_metadata.stop_tokens.add()
        if kind == 0:
            tu.token_ids.ids.extend(ids)
        else:
            tu.token_str = s
    return fixes


def _whitespace_only(entry: tuple[int, tuple[int, ...], str], tokenizer) -> bool:
    kind, ids, text = entry
    if kind == 1:
        return text.strip() == ""
    if tokenizer is None or not ids:
        return False
    decoded = tokenizer.decode(list(ids))
    return decoded != "" and decoded.strip() == ""


# LlmModelType's oneof (litert_lm_builder runtime/proto/llm_model_type.proto).
MODEL_TYPES = ("generic_model", "gemma3n", "function_gemma", "gemma3", "qwen3", "qwen2p5", "gemma4", "fast_vlm",
               "lfm2", "minicpm5", "minicpmv4")


def _set_model_type(llm_metadata, name: str) -> None:
    from litert_lm_builder.runtime.proto import llm_model_type_pb2

    kind = getattr(llm_model_type_pb2, llm_model_type_pb2.LlmModelType.DESCRIPTOR.fields_by_name[name].message_type.name)
    llm_metadata.llm_model_type.CopyFrom(llm_model_type_pb2.LlmModelType(**{name: kind()}))


def _fix_model_type(llm_metadata, wanted: str | None) -> list[str]:
    """The family's LlmModelType in place of the builder's, where they differ (one fix line)."""
    written = llm_metadata.llm_model_type.WhichOneof("model_type")
    if wanted is None or written == wanted:
        return []
    _set_model_type(llm_metadata, wanted)
    return [f"LLM metadata model type {written or 'unset'} replaced by {wanted}: the builder does not map this "
            f"model's config to the type the runtime needs (litert-torch #1005)"]


def _token_value(tu) -> Any:
    if tu.HasField("token_ids"):
        ids = list(tu.token_ids.ids)
        return ids[0] if len(ids) == 1 else ids
    return tu.token_str


def _warn_if_litert_torch_would_patch(tokenizer_json: Path) -> None:
    """litert-torch rewrites a BPE tokenizer with a Metaspace pre-tokenizer but byte-level vocab
    (export_lib._maybe_patch_tokenizer). We carry the bytes unchanged; say so when it applies."""
    import json

    try:
        data = json.loads(tokenizer_json.read_bytes())
    except ValueError:
        raise protocol.BadInput(f"{tokenizer_json} is not valid JSON") from None
    model = data.get("model") or {}
    vocab = model.get("vocab") or {}
    if (
        model.get("type") == "BPE"
        and (data.get("pre_tokenizer") or {}).get("type") == "Metaspace"
        and isinstance(vocab, dict)
        and any("Ġ" in k or "Ċ" in k for k in vocab)
    ):
        protocol.progress(
            "WARNING: tokenizer.json is BPE with a Metaspace pre-tokenizer but byte-level vocab; litert-torch "
            "would patch it to ByteLevel, this bundle carries it unchanged"
        )


# --- build and read back -------------------------------------------------------------------------


@contextlib.contextmanager
def _fixed_system_metadata(litertlm_builder, seed_uuid: str, stamp: str) -> Iterator[None]:
    original = litertlm_builder.populate_system_metadata
    Metadata, DType = litertlm_builder.Metadata, litertlm_builder.DType

    def populate(system_metadata):
        kept = [m for m in system_metadata if m.key not in ("uuid", "creation_timestamp")]
        return kept + [
            Metadata(key="uuid", value=seed_uuid, dtype=DType.STRING),
            Metadata(key="creation_timestamp", value=stamp, dtype=DType.STRING),
        ]

    litertlm_builder.populate_system_metadata = populate
    try:
        yield
    finally:
        litertlm_builder.populate_system_metadata = original


def _read_back(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import io

    from litert_lm_builder import litertlm_core, litertlm_peek

    header = litertlm_peek.read_litertlm_header(str(path), io.StringIO())
    sections = []
    sm = header.SectionMetadata()
    for i in range(sm.ObjectsLength()):
        obj = sm.Objects(i)
        sections.append(
            {
                "type": litertlm_core.any_section_data_type_to_string(obj.DataType()),
                "offset": obj.BeginOffset(),
                "size": obj.EndOffset() - obj.BeginOffset(),
            }
        )
    system = {}
    sysm = header.SystemMetadata()
    for i in range(sysm.EntriesLength()):
        kv = litertlm_peek.kvp_to_dict(sysm.Entries(i))
        system[kv["key"]] = kv["value"]
    return sections, system


# An image model's other sections, in bundle order, with the builder's TfLiteModelType of each.
PART_ORDER = {"embedder": "EMBEDDER", "vision_encoder": "VISION_ENCODER", "vision_adapter": "VISION_ADAPTER"}


def _image_metadata(llm_metadata, source, image: dict[str, Any]) -> None:
    """The image markers and the encoder's size in the LLM metadata, as litert-torch's Gemma 3
    metadata builder writes them (model_ext/gemma3/metadata_builder.py: the gemma3n type carries
    them; litert-lm's Gemma 3 data processor reads them)."""
    from litert_lm_builder.runtime.proto import llm_model_type_pb2

    model_type = source.model_config.model_type
    if model_type != "gemma3":
        raise protocol.BadInput(f"packaging the image sections of model_type {model_type!r} is not supported "
                                "(the farm writes Gemma 3's image metadata only): build it as text only")
    names = getattr(source.tokenizer, "special_tokens_map", {}) or {}
    boi, eoi = names.get("boi_token"), names.get("eoi_token")
    if not boi or not eoi:
        raise protocol.BadInput("the tokenizer names no boi_token/eoi_token (tokenizer_config.json "
                                "extra_special_tokens): the runtime could not place the image")
    if llm_metadata.llm_model_type.WhichOneof("model_type") != "gemma3n":
        # litert-torch's Gemma 3 metadata builder writes gemma3n for an image export: that type
        # carries the markers (a request's llm_model_type fix, if any, ran before this).
        llm_metadata.llm_model_type.CopyFrom(llm_model_type_pb2.LlmModelType(gemma3n=llm_model_type_pb2.Gemma3N()))
    g = llm_metadata.llm_model_type.gemma3n
    g.start_of_image_token.token_str = boi
    g.end_of_image_token.token_str = eoi
    g.image_tensor_height = image["height"]
    g.image_tensor_width = image["width"]


def _verify(path, sections, system, tokenizer_json: Path, tflites: list[Path], seed_uuid: str, stamp: str) -> None:
    if system.get("uuid") != seed_uuid or system.get("creation_timestamp") != stamp:
        raise RuntimeError(
            f"litert_lm_builder ignored the reproducible uuid/timestamp (wrote {system.get('uuid')!r}, "
            f"{system.get('creation_timestamp')!r}): its populate_system_metadata hook changed"
        )
    by_type = {s["type"]: s for s in sections}
    tok = by_type.get("HF_Tokenizer_Zlib")
    models = [s for s in sections if s["type"] == "TFLiteModel"]
    if tok is None or len(models) != len(tflites):
        raise RuntimeError(f"bundle lacks a tokenizer or has {len(models)} model sections for {len(tflites)} "
                           f"inputs: {sorted(by_type)}")
    with open(path, "rb") as f:
        f.seek(tok["offset"])
        raw = f.read(tok["size"])
        size = int.from_bytes(raw[:8], "little")
        data = zlib.decompress(raw[8:])
        if size != len(data) or data != tokenizer_json.read_bytes():
            raise RuntimeError("the bundle's tokenizer section is not the source tokenizer.json byte for byte")
        for model, tflite in zip(models, tflites):
            f.seek(model["offset"])
            if model["size"] != tflite.stat().st_size or _sha256(f, model["size"]) != _sha256_file(tflite):
                raise RuntimeError(f"the bundle's TFLiteModel section at {model['offset']} is not {tflite.name} "
                                   "byte for byte")


def _sha256(f, size: int) -> str:
    h = hashlib.sha256()
    while size > 0:
        chunk = f.read(min(size, 8 << 20))
        if not chunk:
            break
        h.update(chunk)
        size -= len(chunk)
    return h.hexdigest()


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return _sha256(f, path.stat().st_size)


def _drop_start_token_the_template_already_renders(llm_metadata, tokenizer, chat_template: str) -> None:
    """litert-torch writes a start token when the rendered chat template begins with the BOS token.
    For ChatML models whose BOS *is* <|im_start|> (SmolLM2), the template's first role marker is
    that token: the runtime then prepends it a second time (measured: 46 prompt tokens instead of
    45, and the float SmolLM2 bundle answered "L'Étoile, la Marsebeau…" instead of PyTorch's
    "Paris"). Keep the start token only when the model really expects it in front of the rendered
    text: plain tokenization prepends it (add_bos_token), or the template uses the `bos_token`
    variable (which the runtime's renderer leaves empty and restores from start_token)."""
    if not llm_metadata.HasField("start_token"):
        return
    bos_id = getattr(tokenizer, "bos_token_id", None)
    try:
        prepends = bool(bos_id is not None and tokenizer("x").input_ids[:1] == [bos_id])
    except Exception:  # noqa: BLE001 - cannot probe: keep litert-torch's decision
        return
    if prepends or "bos_token" in (chat_template or ""):
        return
    protocol.progress(
        f"start token {tokenizer.bos_token!r} dropped: the chat template renders it itself, "
        "and the runtime would prepend it a second time"
    )
    llm_metadata.ClearField("start_token")
