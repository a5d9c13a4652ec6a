"""The one helper module of the gate measurements (farm_toolchain/gates/<gate>.py).

- The common response (`result`): {"status": pass | warn | fail | skipped, "metrics": {name: number},
  "evidence": [verbatim strings], "runtime": {"package", "version"}, "backend": "cpu", "findings":
  [sentences], ...gate-specific fields}. A gate that fails answers status "fail": a failure is data.
  Only an unusable request raises BadInput.
- Request fields: the gate's settings through `settings(request, Model)`, the model of
  farm_common/gates/<gate>.py that the orchestrator validated them with (one set of defaults for
  both sides); files and derived values by one parser per type (`require_file`, `model_folder`,
  `int_arg`, `stop_ids_arg`, ...), so the one-shot CLI (`python -m farm_toolchain gate <
  request.json`) is as strict.
- Engines: `fresh_engine(path)` opens a new `litert_lm.Engine` on the CPU backend and closes it when
  the block ends. Gates open one per case: an Engine remembers what it ran (a second conversation on
  the same Engine starts from the first one's state; see state_isolation), so a case that shares an
  Engine is not measuring the file alone.
- Bundle reading: the header through `litert_lm_builder.litertlm_peek`, the metadata sections through
  litert_lm_builder's generated proto classes, the TFLite section's signatures through ai_edge_litert's
  flatbuffer schema over an mmap (no weights copied).
- The PyTorch reference: `load_reference(model_dir)` and `reference_generate`, which stops by the
  *source's* end-of-sequence ids (recorded with the source, passed in the request), never by the stop
  tokens of the bundle under test: a reference must not inherit the defect it checks for.

Module level imports only the standard library: the orchestrator's tests import the registry and
every gate module without torch.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import hashlib
import importlib.metadata
import io
import math
import mmap
import os
import re
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

from farm_common.gates.questions import Question
from farm_common.gates.registry import GateParams, parse
from farm_common.wire import MEASURED
from farm_toolchain import protocol
from farm_toolchain.protocol import BadInput

P = TypeVar("P", bound=GateParams)

STATUSES = MEASURED  # could_not_run is the orchestrator's to write (farm_common/wire.py)
RUNTIME_PACKAGE = "litert-lm-api"  # provides the `litert_lm` module (Engine, Session, Conversation)
BACKEND = "cpu"
PREFILL_DECODE_MODEL_TYPE = "tf_lite_prefill_decode"


# --- the common response ---------------------------------------------------------------------------


def runtime_info() -> dict[str, str]:
    """The runtime that ran a gate: the litert-lm-api (the `litert_lm` Python module) where the runtime
    runs (this env's, or the wheel in the arm64 root of an emulated class)."""
    from farm_toolchain.cpu_class import current_packages

    host = current_packages()
    if host is not None:
        return {"package": RUNTIME_PACKAGE, "version": host.get(RUNTIME_PACKAGE, "not installed")}
    try:
        version = importlib.metadata.version(RUNTIME_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    return {"package": RUNTIME_PACKAGE, "version": version}


def _clean_number(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return None  # JSON has no NaN / Infinity
    return value


def result(
    status: str,
    metrics: dict[str, Any],
    evidence: Iterable[str],
    findings: Iterable[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The common gate response. Metrics are numbers or booleans (NaN / inf become null)."""
    if status not in STATUSES:
        raise ValueError(f"gate status must be one of {STATUSES}, got {status!r}")
    return {
        "status": status,
        "metrics": {k: _clean_number(v) for k, v in metrics.items()},
        "evidence": [str(e) for e in evidence],
        "runtime": runtime_info(),
        "backend": BACKEND,
        "findings": [str(f) for f in (findings or [])],
        **extra,
    }


# --- request fields --------------------------------------------------------------------------------


def settings(request: dict[str, Any], model: type[P]) -> P:
    """The gate's settings in the request, read with the model the orchestrator validated them
    with (farm_common/gates/: one set of defaults for both sides); BadInput otherwise."""
    try:
        return parse(model, request)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def require_file(request: dict[str, Any], key: str, what: str = "a path") -> Path:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise BadInput(f"{key} is required: {what}")
    path = Path(value).expanduser()
    if not path.is_file():
        raise BadInput(f"{key} {value} does not exist or is not a file")
    return path


def optional_file(request: dict[str, Any], key: str) -> Path | None:
    return None if request.get(key) is None else require_file(request, key)


def model_folder(request: dict[str, Any], key: str = "model_dir", required: bool = True) -> Path | None:
    """The Hugging Face folder a bundle was converted from (the PyTorch reference)."""
    value = request.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise BadInput(f"{key} is required: the Hugging Face model folder the artifact was converted from")
    path = Path(value).expanduser()
    if not (path / "config.json").is_file():
        raise BadInput(f"{key} {path} is not a Hugging Face model folder (no config.json)")
    return path


def int_arg(request: dict[str, Any], key: str, default: int | None, minimum: int = 1) -> int | None:
    value = request.get(key, default)
    if value is None and default is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadInput(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def number_arg(request: dict[str, Any], key: str, default: float | None, minimum: float = 0.0,
               maximum: float | None = None) -> float | None:
    value = request.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum or (
            maximum is not None and value > maximum):
        bound = f"in [{minimum:g}, {maximum:g}]" if maximum is not None else f">= {minimum:g}"
        raise BadInput(f"{key} must be a number {bound}, got {value!r}")
    return float(value)


def fraction_arg(request: dict[str, Any], key: str, default: float) -> float:
    return number_arg(request, key, default, 0.0, 1.0)  # type: ignore[return-value]


def bool_arg(request: dict[str, Any], key: str, default: bool) -> bool:
    value = request.get(key, default)
    if not isinstance(value, bool):
        raise BadInput(f"{key} must be true or false, got {value!r}")
    return value


def str_list(request: dict[str, Any], key: str, default: list[str] | None = None, minimum: int = 1) -> list[str]:
    value = request.get(key, default)
    if not isinstance(value, list) or len(value) < minimum or not all(isinstance(v, str) and v for v in value):
        raise BadInput(f"{key} must be a list of at least {minimum} non-empty strings")
    return value


def stop_ids_arg(request: dict[str, Any], key: str = "reference_stop_ids") -> list[int]:
    """The source's own end-of-sequence ids (generation_config.json / config.json / tokenizer config,
    as the source stage recorded them). Required: a reference without stops would run every reply to
    the cap, and stops taken from the bundle would inherit the defect under test."""
    value = request.get(key)
    if not isinstance(value, list) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise BadInput(f"{key} must be a non-empty list of token ids: the source's end-of-sequence ids")
    return sorted(set(value))


def end_texts(request: dict[str, Any]) -> list[str]:
    """The text of each of the source's end-of-sequence tokens ("<|im_end|>"), decoded with the
    source's tokenizer.json (request: reference_stop_ids, tokenizer_json); [] when not given. A reply
    that carries one ran past the model's own end of turn: the bundle produced the token and did
    not stop on it."""
    if request.get("reference_stop_ids") is None:
        return []
    ids = stop_ids_arg(request)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(require_file(request, "tokenizer_json", "the source's tokenizer.json")))
    return [t for t in (tok.decode([i], skip_special_tokens=False) for i in ids) if t.strip()]


def sha256_file(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- engines ---------------------------------------------------------------------------------------


def runtime_module(name: str) -> Any:
    """A runtime module (`litert_lm`, `farm_toolchain.tflite_run`) where this gate's runtime runs:
    this process's, or a proxy of it in the runtime host presenting another CPU class
    (farm_toolchain/cpu_class.py). Gates never import the runtime themselves."""
    from farm_toolchain import cpu_class

    return cpu_class.runtime_module(name)


def litert_lm() -> Any:
    return runtime_module("litert_lm")


def greedy_sampler():
    return litert_lm().SamplerConfig(top_k=1, temperature=0.0)


# Engines of one bundle in one process share one private folder, so the XNNPACK weight cache the
# first Engine writes there is read by the next (measured 2026-12-07, SmolLM2-135M's int8 bundle: an
# Engine opened in 2.9 s cold, 1.7-2.0 s with the cache; a gate suite opens one bundle ~50 times).
# Private to the process, and a process runs under one CPU class: no other class's cache is read.
# The last _KEEP bundles keep their folder (a suite's file and the text twin or float file it is
# compared with); the rest are removed, and every one when the process ends its requests
# (protocol.at_exit: the toolchain leaves by os._exit, which runs no atexit hook — measured: one
# test-suite run left 59 folders, 3.6 GB, in /tmp). A process killed outright cannot remove its
# own: its folders carry its pid, and the next process to open an Engine removes those of pids
# that no longer run.
_ENGINE_FOLDERS: "collections.OrderedDict[tuple, Path]" = collections.OrderedDict()
_KEEP = 2
_PREFIX = "farm-gate-"


@contextlib.contextmanager
def engine_path(bundle_path: Path | str) -> Iterator[Path]:
    """A path litert-lm accepts, in a folder of its own: litert-lm picks the model format by file suffix
    (store objects have none), and XNNPACK writes a weight cache beside the model
    (`<name>_<mtime>_<size>.xnnpack_cache`) whose key names no instruction set — measured: a cache an
    arm64 run left beside a file made the next x86 run report mismatched kernel fingerprints. So every
    Engine opens a hard link (or copy) in a folder private to this process, kept for the next Engine
    of the same bytes (keyed by path, inode, size and mtime)."""
    path = Path(bundle_path)
    st = path.stat()
    key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    target = _ENGINE_FOLDERS.get(key)
    if target is None or not target.exists():
        if not _ENGINE_FOLDERS:
            sweep_engine_folders()
            protocol.at_exit(_drop_engine_folders)
            atexit.register(_drop_engine_folders)  # a process that imports the gates without the protocol
        target = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")) / (path.name + ".litertlm")
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        _ENGINE_FOLDERS[key] = target
        while len(_ENGINE_FOLDERS) > _KEEP:
            _, old = _ENGINE_FOLDERS.popitem(last=False)
            shutil.rmtree(old.parent, ignore_errors=True)
    else:
        _ENGINE_FOLDERS.move_to_end(key)
    yield target


def _drop_engine_folders() -> None:
    while _ENGINE_FOLDERS:
        shutil.rmtree(_ENGINE_FOLDERS.popitem()[1].parent, ignore_errors=True)


def sweep_engine_folders(tmp: Path | None = None) -> list[Path]:
    """Remove the engine folders of processes that no longer run (killed before their exit hook);
    the folders removed. A folder of a live process, or one whose name carries no pid, is left."""
    removed = []
    for folder in Path(tmp or tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        pid = folder.name[len(_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _running(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True


def cpu_backend() -> Any:
    """The runtime's CPU backend with this process's thread budget (farm_toolchain/threads.py: the
    count changes no answer, only speed; left to itself the runtime starts 4 threads on any host)."""
    from farm_toolchain import threads

    return litert_lm().Backend.CPU(thread_count=threads.budget())


@contextlib.contextmanager
def fresh_engine(bundle_path: Path | str, max_num_tokens: int | None = None, benchmark: bool = False) -> Iterator[Any]:
    """A new Engine on the CPU backend (of the CPU class the runtime runs on), closed when the block
    ends. With benchmark, sessions and conversations report decoded token counts (`decode_count`)."""
    litert_lm_ = litert_lm()
    with engine_path(bundle_path) as path:
        kwargs = {"enable_benchmark": True} if benchmark else {}
        engine = litert_lm_.Engine(str(path), backend=cpu_backend(), max_num_tokens=max_num_tokens, **kwargs)
        try:
            yield engine
        finally:
            engine.close()


def decode_count(obj: Any) -> int | None:
    """Tokens the last decode produced (from the benchmark info of an Engine opened with benchmark)."""
    try:
        return int(obj.get_benchmark_info().last_decode_token_count)
    except Exception:  # noqa: BLE001 - benchmark info is a convenience, not the measurement
        return None


_LOG_PREFIX = re.compile(r"^(?:[IWEF]\d{4} |INFO: |WARNING: |ERROR: |=== |third_party/|\S+\.cc:\d+$)")
_ERROR_LINE = re.compile(r"^[EF]\d{4} [^\]]*\] (.*)$")


@contextlib.contextmanager
def native_errors() -> Iterator[list[str]]:
    """Collect the error messages the runtime's C++ code logs on fd 2 during the block (the Python API
    raises only "litert_lm_conversation_send_message failed"; the reason — "Input token ids are too
    long", "The new rendered template string does not start with …" — is in that log). Everything
    captured is written back to stderr afterwards."""
    messages: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield messages
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            sys.stderr.write(text)
            sys.stderr.flush()
            current: list[str] | None = None
            for line in text.splitlines():
                m = _ERROR_LINE.match(line)
                if m:
                    if current is not None:
                        messages.append("\n".join(current).strip())
                    current = [m.group(1)]
                elif current is not None and not _LOG_PREFIX.match(line):
                    current.append(line)
                elif current is not None:
                    messages.append("\n".join(current).strip())
                    current = None
            if current is not None:
                messages.append("\n".join(current).strip())


def first_native_error(messages: list[str]) -> str | None:
    """The most telling captured message: the first that says why something failed."""
    for m in messages:
        if "Failed" in m or "INVALID_ARGUMENT" in m or "INTERNAL" in m or "too long" in m:
            return m[:2000]
    return messages[0][:2000] if messages else None


def message_text(message: Any) -> str:
    """The text parts of a litert_lm Message (or its JSON dict), joined."""
    data = message.to_json() if hasattr(message, "to_json") else message
    content = data.get("content", "") if isinstance(data, dict) else data
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def text_parts(text: str) -> list[dict[str, str]]:
    """The content-part form of a message (what litert-lm hands the chat template)."""
    return [{"type": "text", "text": text}]


def render_template(template: str, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
    """A chat template rendered by transformers' own Jinja renderer (what apply_chat_template runs)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[messages], chat_template=template, add_generation_prompt=generation_prompt
    )
    return rendered[0]


def source_template(model_dir: Path | None) -> str | None:
    """The source folder's chat template: chat_template.jinja, else tokenizer_config.json's."""
    import json

    if model_dir is None:
        return None
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    cfg = model_dir / "tokenizer_config.json"
    if cfg.is_file():
        tpl = json.loads(cfg.read_text(encoding="utf-8")).get("chat_template")
        return tpl if isinstance(tpl, str) else None
    return None


def short(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[: limit // 2] + " … " + text[-limit // 2:]


def ask(engine: Any, prompt: str, max_tokens: int, system: str | None = None) -> dict[str, Any]:
    """One question through the conversation API (the path `litert-lm run` takes: the bundle's own
    chat template), greedy: {"reply", "decode_tokens", "error"}. A runtime failure is the answer's
    error, not an exception."""

    def run() -> tuple[str, int | None]:
        conv = engine.create_conversation(sampler_config=greedy_sampler(), max_output_tokens=max_tokens,
                                          system_message=system)
        try:
            return message_text(conv.send_message(prompt)), decode_count(conv)
        finally:
            conv.close()

    return _generation(run)


def complete(engine: Any, text: str, max_tokens: int) -> dict[str, Any]:
    """Raw-text completion, greedy, no chat template (a base model's prompt): one session,
    `run_prefill([text])` then `run_decode()`, the path generation_parity takes without a template.
    Same shape as ask()."""

    def run() -> tuple[str, int | None]:
        session = engine.create_session(apply_prompt_template=False, sampler_config=greedy_sampler(),
                                        max_output_tokens=max_tokens)
        try:
            session.run_prefill([text])
            return session.run_decode().texts[0], decode_count(session)
        finally:
            session.close()

    return _generation(run)


def _generation(run: Any) -> dict[str, Any]:
    """{"reply", "decode_tokens", "error"} of one greedy generation; a runtime failure (with the
    native log's first error line) is the result's error, not an exception."""
    reply, count, error = "", None, None
    with native_errors() as native:
        try:
            reply, count = run()
        except Exception as exc:  # noqa: BLE001 - a runtime failure is this prompt's result
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            error = f"{type(exc).__name__}: {first}"
    if error is not None:
        reason = first_native_error(native)
        error += f" (runtime: {reason})" if reason else ""
    return {"reply": reply, "decode_tokens": count, "error": error}


# --- reading a bundle ------------------------------------------------------------------------------


def sections(bundle_path: Path | str) -> list[dict[str, Any]]:
    """[{"index", "type", "begin", "end", "items": {key: value}}] from the bundle header."""
    from litert_lm_builder import litertlm_core, litertlm_peek

    try:
        header = litertlm_peek.read_litertlm_header(str(bundle_path), io.StringIO())
    except (ValueError, OSError, IndexError) as exc:
        raise BadInput(f"{bundle_path} is not a readable .litertlm file: {exc}") from exc
    meta = header.SectionMetadata()
    out = []
    for i in range(meta.ObjectsLength() if meta else 0):
        obj = meta.Objects(i)
        if obj is None:
            continue
        items = {}
        for j in range(obj.ItemsLength()):
            kvp = obj.Items(j)
            if kvp is not None:
                kv = litertlm_peek.kvp_to_dict(kvp)
                items[kv["key"]] = kv.get("value")
        out.append({
            "index": i,
            "type": litertlm_core.any_section_data_type_to_string(obj.DataType()),
            "begin": obj.BeginOffset(),
            "end": obj.EndOffset(),
            "items": items,
        })
    return out


def section_bytes(bundle_path: Path | str, section: dict[str, Any]) -> bytes:
    with open(bundle_path, "rb") as f:
        f.seek(section["begin"])
        return f.read(section["end"] - section["begin"])


def find_section(secs: list[dict[str, Any]], type_name: str) -> dict[str, Any] | None:
    return next((s for s in secs if s["type"] == type_name), None)


def llm_metadata(bundle_path: Path | str, secs: list[dict[str, Any]] | None = None):
    """The LlmMetadata proto, or None when the bundle has no LlmMetadataProto section."""
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    secs = secs if secs is not None else sections(bundle_path)
    sec = find_section(secs, "LlmMetadataProto")
    if sec is None:
        return None
    proto = llm_metadata_pb2.LlmMetadata()
    proto.ParseFromString(section_bytes(bundle_path, sec))
    return proto


def executor_metadata(bundle_path: Path | str, secs: list[dict[str, Any]] | None = None):
    from litert_lm_builder.runtime.proto import executor_metadata_pb2

    secs = secs if secs is not None else sections(bundle_path)
    sec = find_section(secs, "ExecutorMetadataProto")
    if sec is None:
        return None
    proto = executor_metadata_pb2.ExecutorMetadata()
    proto.ParseFromString(section_bytes(bundle_path, sec))
    return proto


def hf_tokenizer_json(bundle_path: Path | str, secs: list[dict[str, Any]] | None = None) -> bytes | None:
    """The tokenizer.json bytes of the HF_Tokenizer_Zlib section (8-byte little-endian size + zlib).
    Raises ValueError when the section does not decode to its declared size."""
    secs = secs if secs is not None else sections(bundle_path)
    sec = find_section(secs, "HF_Tokenizer_Zlib")
    if sec is None:
        return None
    raw = section_bytes(bundle_path, sec)
    if len(raw) < 8:
        raise ValueError(f"HF_Tokenizer_Zlib section is {len(raw)} bytes, shorter than its size prefix")
    size = int.from_bytes(raw[:8], "little")
    d = zlib.decompressobj()
    data = d.decompress(raw[8:]) + d.flush()
    if not d.eof:
        raise ValueError("HF_Tokenizer_Zlib section: the zlib stream is truncated")
    if len(data) != size:
        raise ValueError(f"HF_Tokenizer_Zlib section: declared size {size}, decompressed {len(data)} bytes")
    if d.unused_data.strip(b"\0"):
        raise ValueError(f"HF_Tokenizer_Zlib section: {len(d.unused_data)} bytes after the zlib stream")
    return data


def tflite_signatures(bundle_path: Path | str, secs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """{signature key: {"inputs": {name: shape}, "outputs": {name: shape}}} of every TFLiteModel
    section (read over an mmap of the bundle, no weights copied)."""
    from farm_toolchain.tflite import signatures_at

    secs = secs if secs is not None else sections(bundle_path)
    out: dict[str, Any] = {}
    with open(bundle_path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as whole:
        for sec in secs:
            if sec["type"] != "TFLiteModel":
                continue
            for key, sig in signatures_at(whole, sec["begin"]).items():
                out[key] = {"section": sec["index"], "model_type": sec["items"].get("model_type"), **sig}
    return out


def prefill_plan(bundle_path: Path | str) -> dict[str, Any]:
    """{"prefill_lengths": sorted N of the prefill_<N> signatures, "cache_length": the mask's last
    dimension (or the metadata's max_num_tokens), "max_num_tokens": from the LLM metadata}."""
    secs = sections(bundle_path)
    sigs = tflite_signatures(bundle_path, secs)
    prefills = sorted(int(k.split("_", 1)[1]) for k in sigs if k.startswith("prefill_") and k[8:].isdigit())
    cache = None
    for key in (f"prefill_{n}" for n in prefills):
        mask = sigs[key]["inputs"].get("mask")
        if mask:
            cache = mask[-1]
            break
    meta = llm_metadata(bundle_path, secs)
    max_tokens = int(meta.max_num_tokens) if meta is not None and meta.max_num_tokens else None
    return {
        "prefill_lengths": prefills,
        "cache_length": cache if cache is not None else max_tokens,
        "max_num_tokens": max_tokens,
        "signatures": sorted(sigs),
    }


def capacity(bundle_path: Path | str) -> int:
    """How many tokens an Engine on this bundle holds (LLM metadata, else the mask's cache length)."""
    meta = llm_metadata(bundle_path)
    if meta is not None and meta.max_num_tokens:
        return int(meta.max_num_tokens)
    return int(prefill_plan(bundle_path)["cache_length"] or 1024)


def extract_tflite(
    bundle_path: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    model_type: str = PREFILL_DECODE_MODEL_TYPE,
) -> dict[str, Any]:
    """Copy the bundle's prefill/decode TFLiteModel section, byte for byte, to `dest` (streamed), so a
    gate measures exactly the bytes the bundle ships. With several TFLiteModel sections (vision
    bundles: embedder, encoder, adapter…) the one whose model_type is `model_type` is taken; a bundle
    with a single TFLiteModel section gives that one. Returns {path, section_index, offset, size,
    sha256, model_type}."""
    found = [s for s in sections(bundle_path) if s["type"] == "TFLiteModel"]
    if not found:
        raise BadInput(f"{bundle_path} has no TFLiteModel section")
    if len(found) == 1:
        chosen = found[0]
    else:
        matching = [s for s in found if s["items"].get("model_type") == model_type]
        if len(matching) != 1:
            types = [s["items"].get("model_type") for s in found]
            raise BadInput(f"{bundle_path} has TFLiteModel sections {types}: expected exactly one {model_type!r}")
        chosen = matching[0]
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    remaining = chosen["end"] - chosen["begin"]
    with open(bundle_path, "rb") as src, open(dest, "wb") as out:
        src.seek(chosen["begin"])
        while remaining:
            chunk = src.read(min(1 << 20, remaining))
            if not chunk:
                raise BadInput(f"{bundle_path} is truncated: section {chosen['index']} runs past the end of the file")
            digest.update(chunk)
            out.write(chunk)
            remaining -= len(chunk)
    return {
        "path": str(dest),
        "section_index": chosen["index"],
        "offset": chosen["begin"],
        "size": chosen["end"] - chosen["begin"],
        "sha256": digest.hexdigest(),
        "model_type": chosen["items"].get("model_type"),
    }


def with_named_set(request: dict[str, Any], key: str, sets: dict[str, list[dict[str, str]]]) -> dict[str, Any]:
    """A request whose `key` names a shipped set (a request written by hand: "questions": "sanity")
    with that set's items in its place; any other request as it is."""
    raw = request.get(key)
    if not isinstance(raw, str):
        return request
    if raw not in sets:
        raise BadInput(f"{key} {raw!r} is not a known set: use one of {sorted(sets)} or a list")
    return {**request, key: sets[raw]}


def compiled(questions: Iterable[Any]) -> list[dict[str, Any]]:
    """[{"prompt", "expect", "pattern"}] from validated questions (Question)."""
    return [{"prompt": q.prompt, "expect": q.expect, "pattern": re.compile(q.expect, re.IGNORECASE)} for q in questions]


# --- shipped data ---------------------------------------------------------------------------------

DEFAULT_STRINGS = Path(__file__).resolve().parent.parent / "data" / "tokenizer_strings.json"


def load_strings(raw: Any = None) -> list[dict[str, str]]:
    """[{"id", "script", "text"}] from a request's "strings", or the shipped set
    (farm_toolchain/data/tokenizer_strings.json: 182 multilingual strings)."""
    import json

    if raw is None:
        data = json.loads(DEFAULT_STRINGS.read_text(encoding="utf-8"))
        return [dict(s) for s in data["strings"]]
    if not isinstance(raw, list) or not raw:
        raise BadInput("strings must be a non-empty list of strings or {id, script, text} objects")
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            out.append({"id": f"custom-{i + 1:03d}", "script": "custom", "text": item})
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            out.append(
                {
                    "id": str(item.get("id") or f"custom-{i + 1:03d}"),
                    "script": str(item.get("script") or "custom"),
                    "text": item["text"],
                }
            )
        else:
            raise BadInput(f"strings[{i}] must be a string or an object with a string 'text'")
    return out


# --- the PyTorch reference -------------------------------------------------------------------------

_REFERENCES: dict[str, tuple[Any, Any]] = {}
# reference_generate's answers for the loaded reference (emptied with it): small (ids and margins).
_GENERATED: dict[tuple, dict[str, Any]] = {}


def load_reference(model_dir: Path, progress: Any = None) -> tuple[Any, Any]:
    """(tokenizer, float32 model) of the source folder, loaded once per toolchain process and folder
    content: a suite runs several gates on one reference, and loading it is most of their cost. The
    key is the folder plus its config/weights file stamps, so an edited folder is loaded again."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stamp = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                         for p in Path(model_dir).iterdir() if p.is_file() or p.is_symlink()))
    key = f"{Path(model_dir).resolve()}:{hash(stamp)}"
    if key not in _REFERENCES:
        if progress is not None:
            progress(f"loading the PyTorch reference from {model_dir} (float32)")
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        _REFERENCES.clear()  # one reference at a time: a second model would double the memory
        _GENERATED.clear()
        _REFERENCES[key] = (tokenizer, model)
    return _REFERENCES[key]


def reference_generate(model: Any, input_ids: list[int], max_tokens: int, stop_ids: list[int]) -> dict[str, Any]:
    """PyTorch float32 greedy generation from `input_ids`, stopping at the source's own
    end-of-sequence ids. {"ids": reply ids (the stop excluded), "stop": "stop" | "cap", "stop_id",
    "margins": PyTorch's own top-1/top-2 logit margin at each generated position}. A stop on the
    very last allowed token counts as "cap": litert-lm's decoded count cannot tell the two apart there.

    Kept per toolchain process for the loaded reference: a suite asks the same reference once per
    CPU class (the runtime runs under each class, the reference always here), and it is the larger
    part of an answer gate's time (SmolLM2's task questions: ~2/3)."""
    key = (id(model), tuple(input_ids), max_tokens, tuple(stop_ids))
    if key not in _GENERATED:
        _GENERATED[key] = _generate(model, input_ids, max_tokens, stop_ids)
    got = _GENERATED[key]
    return {**got, "ids": list(got["ids"]), "margins": list(got["margins"])}


def _generate(model: Any, input_ids: list[int], max_tokens: int, stop_ids: list[int]) -> dict[str, Any]:
    import torch

    pad_id = getattr(model.config, "pad_token_id", None)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([input_ids], dtype=torch.long),
            attention_mask=torch.ones(1, len(input_ids), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=stop_ids,
            pad_token_id=pad_id if pad_id is not None else stop_ids[0],
            output_logits=True,
            return_dict_in_generate=True,
        )
    gen = out.sequences[0, len(input_ids):].tolist()
    margins = [top2_margin(row[0]) for row in out.logits]
    stop_at = next((i for i, t in enumerate(gen) if t in stop_ids), None)
    if stop_at is None:
        return {"ids": gen, "stop": "cap", "stop_id": None, "margins": margins}
    stop = "stop" if stop_at < max_tokens - 1 else "cap"
    return {"ids": gen[:stop_at], "stop": stop, "stop_id": gen[stop_at], "margins": margins}


def reference_generate_inputs(model: Any, inputs: dict[str, Any], max_tokens: int, stop_ids: list[int]) -> list[int]:
    """PyTorch float32 greedy reply ids (the stop excluded) from a processor's whole output
    (input_ids, attention_mask, pixel_values, ...): an image turn's reference."""
    import torch

    pad_id = getattr(model.config.get_text_config(), "pad_token_id", None)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_tokens, do_sample=False, eos_token_id=stop_ids,
                             pad_token_id=pad_id if pad_id is not None else stop_ids[0])
    gen = out[0, inputs["input_ids"].shape[1]:].tolist()
    stop_at = next((i for i, t in enumerate(gen) if t in stop_ids), None)
    return gen if stop_at is None else gen[:stop_at]


def top2_margin(logits_row: Any) -> float:
    """PyTorch's own top-1 minus top-2 logit at one position: how decided the reference was."""
    import torch

    top = torch.topk(logits_row.float().reshape(-1), 2).values.tolist()
    return float(top[0] - top[1])


def answer_case(bundle: Path | str, tokenizer: Any, model: Any, prompt: str, pattern: Any, max_tokens: int,
                stop_ids: list[int], end_texts: list[str], completion: bool = False,
                system: str | None = None, max_num_tokens: int | None = None) -> dict[str, Any]:
    """One question asked of the bundle (a fresh Engine: a Conversation through its own chat template,
    or a raw completion) and of the PyTorch float32 reference (the source tokenizer's render of the
    same message, greedy, stopping at the source's own end-of-sequence ids), each reply scored for
    the answer (`pattern`) and for degeneration. `answer_lost`: the reference answers right and the
    bundle does not; `loops_where_reference_ends`: the bundle's reply degenerates, errs or runs past
    its own end of turn where the reference ended cleanly. The arithmetic and task_accuracy gates'
    shared case."""
    from farm_toolchain.gates import degeneration

    with fresh_engine(bundle, max_num_tokens, benchmark=True) as engine:
        got = complete(engine, prompt, max_tokens) if completion else ask(engine, prompt, max_tokens, system)
    count = got["decode_tokens"]
    lt_cap = None if count is None else count >= max_tokens
    lt_deg = degeneration.detect(got["reply"], None, max_tokens, hit_cap=lt_cap)
    lt_right = got["error"] is None and bool(pattern.search(got["reply"]))
    ran_past = any(t in got["reply"] for t in end_texts)

    if completion:
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    else:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ref = reference_generate(model, ids, max_tokens, stop_ids)
    ref_text = tokenizer.decode(ref["ids"], skip_special_tokens=True)
    ref_deg = degeneration.detect(ref_text, ref["ids"], max_tokens, hit_cap=ref["stop"] == "cap")
    ref_right = bool(pattern.search(ref_text)) and not ref_deg["degenerate"]
    # A completion has no end of turn: running to the cap is how it ends, on both sides.
    ref_clean = (completion or ref["stop"] == "stop") and not ref_deg["degenerate"]
    loops = ref_clean and (lt_deg["degenerate"] or ran_past or got["error"] is not None)
    lost = ref_right and not (lt_right and not lt_deg["degenerate"])
    return {
        "prompt": prompt,
        "litert": {"reply": got["reply"], "decode_tokens": count, "error": got["error"], "right": lt_right,
                   "degeneration": lt_deg, "ran_to_cap": lt_cap, "ran_past_end": ran_past},
        "pytorch": {"reply": ref_text, "tokens": len(ref["ids"]), "stop": ref["stop"], "right": ref_right,
                    "degeneration": ref_deg},
        "loops_where_reference_ends": loops,
        "answer_lost": lost,
    }


def answer_evidence(label: str, case: dict[str, Any], verdict: str) -> str:
    """One evidence line of an answer_case: both replies, their token counts and verdicts."""
    lt, pt = case["litert"], case["pytorch"]
    count = lt["decode_tokens"]
    return (
        f"{label} {case['prompt']!r}: litert-lm {short(lt['error'] or lt['reply'], 200)!r} "
        f"[{count if count is not None else '?'} tokens, {'right' if lt['right'] else 'wrong'}"
        f"{', ' + lt['degeneration']['reason'] if lt['degeneration']['degenerate'] else ''}"
        f"{', to the cap' if lt['ran_to_cap'] else ''}{', past its end-of-turn' if lt['ran_past_end'] else ''}] | "
        f"pytorch {short(pt['reply'], 200)!r} [{pt['tokens']} tokens, {pt['stop']}, "
        f"{'right' if pt['right'] else 'wrong'}{', ' + pt['degeneration']['reason'] if pt['degeneration']['degenerate'] else ''}]"
        f" -> {verdict}"
    )
