"""Correctness gates: toolchain commands that measure a converted model against its PyTorch source.

Commands (registered in farm_toolchain/__main__.py):
- `gate_logits` (logits.py): teacher-forced logits parity of a .tflite (float export or quantized
  model) against the PyTorch model;
- `gate_generation` (generation.py): greedy litert-lm output of a bundle vs PyTorch `generate` on the
  same token ids;
- `gate_questions` (generation.py): a sanity question set answered by the bundle, each reply checked
  against a regex and by the degeneration detector (degeneration.py, standard library only).

Every gate answers the same shape (`result`):
    {"status": "pass" | "fail" | "skipped", "metrics": {name: number}, "evidence": [verbatim strings],
     "runtime": {"package": "litert-lm-api", "version": ...}, "backend": "cpu", "findings": [sentences],
     ...command-specific fields}
A gate that fails answers status "fail": a failure is data. Only unusable requests raise BadInput.

This module is imported by the orchestrator's tests (through farm_toolchain.gates.degeneration), so it
imports nothing beyond the standard library at module level.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from farm_toolchain.protocol import BadInput

STATUSES = ("pass", "fail", "skipped")
RUNTIME_PACKAGE = "litert-lm-api"  # provides the `litert_lm` module (Engine, Session)
BACKEND = "cpu"
PREFILL_DECODE_MODEL_TYPE = "tf_lite_prefill_decode"


def runtime_info() -> dict[str, str]:
    """The runtime that ran a gate: the installed litert-lm-api (the `litert_lm` Python module)."""
    try:
        version = metadata.version(RUNTIME_PACKAGE)
    except metadata.PackageNotFoundError:
        version = "not installed"
    return {"package": RUNTIME_PACKAGE, "version": version}


def _clean_number(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
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
    """The common gate response. Metrics are numbers (NaN / inf become null); evidence is strings."""
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


# --- request helpers -------------------------------------------------------------------------------


def existing_file(request: dict[str, Any], key: str, what: str) -> Path:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise BadInput(f"{key} is required: {what}")
    path = Path(value).expanduser().resolve()
    if not path.is_file():
        raise BadInput(f"{key} {path} does not exist or is not a file")
    return path


def model_folder(request: dict[str, Any], key: str = "model_dir") -> Path:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise BadInput(f"{key} is required: the Hugging Face model folder the artifact was converted from")
    path = Path(value).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise BadInput(f"{key} {path} is not a Hugging Face model folder (no config.json)")
    return path


def int_arg(request: dict[str, Any], key: str, default: int, minimum: int = 1) -> int:
    value = request.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadInput(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def fraction_arg(request: dict[str, Any], key: str, default: float) -> float:
    value = request.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise BadInput(f"{key} must be a number between 0 and 1, got {value!r}")
    return float(value)


def bool_arg(request: dict[str, Any], key: str, default: bool) -> bool:
    value = request.get(key, default)
    if not isinstance(value, bool):
        raise BadInput(f"{key} must be true or false, got {value!r}")
    return value


# --- bundles ---------------------------------------------------------------------------------------


def _section_items(section: Any) -> dict[str, Any]:
    from litert_lm_builder import litertlm_peek

    items = {}
    for j in range(section.ItemsLength()):
        kvp = section.Items(j)
        if kvp is not None:
            d = litertlm_peek.kvp_to_dict(kvp)
            items[d["key"]] = d["value"]
    return items


def tflite_sections(bundle_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The TFLiteModel sections of a .litertlm: index, begin offset, size, model_type (if recorded)."""
    import io

    from litert_lm_builder import litertlm_core, litertlm_peek

    try:
        meta = litertlm_peek.read_litertlm_header(str(bundle_path), io.StringIO())
    except (ValueError, OSError, IndexError) as exc:
        raise BadInput(f"{bundle_path} is not a readable .litertlm bundle: {exc}") from exc
    sections = meta.SectionMetadata()
    found = []
    for i in range(sections.ObjectsLength() if sections else 0):
        obj = sections.Objects(i)
        if obj is None:
            continue
        if litertlm_core.any_section_data_type_to_string(obj.DataType()) != "TFLiteModel":
            continue
        items = _section_items(obj)
        found.append(
            {
                "index": i,
                "offset": obj.BeginOffset(),
                "size": obj.EndOffset() - obj.BeginOffset(),
                "model_type": items.get("model_type"),
            }
        )
    return found


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
    sections = tflite_sections(bundle_path)
    if not sections:
        raise BadInput(f"{bundle_path} has no TFLiteModel section")
    if len(sections) == 1:
        chosen = sections[0]
    else:
        matching = [s for s in sections if s["model_type"] == model_type]
        if len(matching) != 1:
            types = [s["model_type"] for s in sections]
            raise BadInput(f"{bundle_path} has TFLiteModel sections {types}: expected exactly one {model_type!r}")
        chosen = matching[0]
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    remaining = chosen["size"]
    with open(bundle_path, "rb") as src, open(dest, "wb") as out:
        src.seek(chosen["offset"])
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
        "offset": chosen["offset"],
        "size": chosen["size"],
        "sha256": digest.hexdigest(),
        "model_type": chosen["model_type"],
    }


def copy_to_scratch(path: Path, scratch: Path) -> Path:
    """litert-lm picks the model format by file suffix; store objects have none. A hard link (or
    copy) named *.litertlm in a scratch folder."""
    target = scratch / (path.stem + ".litertlm" if path.suffix != ".litertlm" else path.name)
    try:
        os.link(path, target)
    except OSError:
        shutil.copyfile(path, target)
    return target
