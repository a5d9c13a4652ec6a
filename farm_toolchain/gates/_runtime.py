"""Shared helpers for the gate commands that run a bundle in litert-lm (tokenizer, prompt lengths,
conversation, metadata).

- Engines: `fresh_engine(path)` opens a new `litert_lm.Engine` on the CPU backend and closes it when
  the block ends. Gates open one per case: an Engine remembers what it ran (a second conversation on
  the same Engine starts from the first one's state; see gate_state_isolation), so a case that shares
  an Engine is not measuring the file alone.
- Bundle reading: the header through `litert_lm_builder.litertlm_peek.read_litertlm_header`, the
  metadata sections through litert_lm_builder's generated proto classes, the TFLite section's
  signatures through ai_edge_litert's flatbuffer schema over an mmap (no weights copied).
- The common response (`result`, `runtime_info`): taken from the `farm_toolchain.gates` package when
  it provides them, otherwise the equivalents below (same shape).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import mmap
import os
import re
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any, Iterator

from farm_toolchain.protocol import BadInput

BACKEND = "cpu"


# --- the common response --------------------------------------------------------------------------


def _runtime_info_fallback() -> dict[str, Any]:
    try:
        version = importlib.metadata.version("litert-lm-api")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - the toolchain always has it
        version = None
    return {"package": "litert-lm-api", "version": version}


def _result_fallback(
    status: str, metrics: dict[str, Any], evidence: list[str], findings: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    if status not in ("pass", "fail", "skipped"):
        raise ValueError(f"gate status must be pass, fail or skipped, not {status!r}")
    return {
        "status": status,
        "metrics": metrics,  # numbers and booleans only
        "evidence": [str(e) for e in evidence],
        "runtime": _runtime_info_fallback(),
        "backend": BACKEND,
        "findings": [str(f) for f in (findings or [])],
        **extra,
    }


try:  # the other gates' package module, when it is there
    from farm_toolchain.gates import result as _shared_result  # type: ignore[attr-defined]
    from farm_toolchain.gates import runtime_info as _shared_runtime_info  # type: ignore[attr-defined]
except ImportError:
    _shared_result = None
    _shared_runtime_info = None


def runtime_info() -> dict[str, Any]:
    return (_shared_runtime_info or _runtime_info_fallback)()


def result(status: str, metrics: dict[str, Any], evidence: list[str], **extra: Any) -> dict[str, Any]:
    """{"status", "metrics" (numbers and booleans only), "evidence", "runtime", "backend": "cpu",
    "findings", **extra (structured details go here, not in metrics)}."""
    out = (_shared_result or _result_fallback)(status, metrics, evidence, **extra)
    out.setdefault("backend", BACKEND)
    out.setdefault("findings", [])
    out.setdefault("runtime", runtime_info())
    return out


# --- request fields -----------------------------------------------------------------------------


def require_file(request: dict[str, Any], key: str) -> Path:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise BadInput(f"{key} is required: a path")
    path = Path(value).expanduser()
    if not path.is_file():
        raise BadInput(f"{key} {value} is not a file")
    return path


def require_dir(request: dict[str, Any], key: str) -> Path:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise BadInput(f"{key} is required: a folder")
    path = Path(value).expanduser()
    if not path.is_dir():
        raise BadInput(f"{key} {value} is not a folder")
    return path


def optional_int(request: dict[str, Any], key: str, default: int, minimum: int = 1) -> int:
    value = request.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadInput(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def optional_bool(request: dict[str, Any], key: str, default: bool) -> bool:
    value = request.get(key, default)
    if not isinstance(value, bool):
        raise BadInput(f"{key} must be true or false, got {value!r}")
    return value


# --- engines ------------------------------------------------------------------------------------


def greedy_sampler():
    import litert_lm

    return litert_lm.SamplerConfig(top_k=1, temperature=0.0)


@contextlib.contextmanager
def engine_path(bundle_path: Path | str) -> Iterator[Path]:
    """A path litert-lm accepts: it picks the model format by file suffix and store objects have none,
    so a suffix-less file is hard-linked (or copied) as *.litertlm into a temporary folder."""
    path = Path(bundle_path)
    if path.suffix == ".litertlm":
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="farm-gate-") as tmp:
        target = Path(tmp) / (path.name + ".litertlm")
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        yield target


@contextlib.contextmanager
def fresh_engine(bundle_path: Path | str, max_num_tokens: int | None = None) -> Iterator[Any]:
    """A new Engine on the CPU backend, closed when the block ends."""
    import litert_lm

    with engine_path(bundle_path) as path:
        engine = litert_lm.Engine(str(path), backend=litert_lm.Backend.CPU(), max_num_tokens=max_num_tokens)
        try:
            yield engine
        finally:
            engine.close()


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
    return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


# --- reading a bundle ---------------------------------------------------------------------------


def sections(bundle_path: Path | str) -> list[dict[str, Any]]:
    """[{"index", "type", "begin", "end", "items": {key: value}}] from the bundle header."""
    from litert_lm_builder import litertlm_core, litertlm_peek

    try:
        header = litertlm_peek.read_litertlm_header(str(bundle_path), io.StringIO())
    except (ValueError, OSError) as exc:
        raise BadInput(f"{bundle_path} is not a readable .litertlm file: {exc}") from exc
    meta = header.SectionMetadata()
    out = []
    for i in range(meta.ObjectsLength() if meta else 0):
        obj = meta.Objects(i)
        items = {}
        for j in range(obj.ItemsLength()):
            kv = litertlm_peek.kvp_to_dict(obj.Items(j))
            items[kv["key"]] = kv.get("value")
        out.append(
            {
                "index": i,
                "type": litertlm_core.any_section_data_type_to_string(obj.DataType()),
                "begin": obj.BeginOffset(),
                "end": obj.EndOffset(),
                "items": items,
            }
        )
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


def quiet_tokenizers() -> None:
    """One Rayon thread for the tokenizers library (deterministic, and no fork warnings)."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
