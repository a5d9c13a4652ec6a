"""Refusals before any work: sources the farm will not convert, each with a reason, the detail and
what to do next (hf-to-litertlm refuses these before it downloads a weight; so does the farm).

One module per reason (`farm/refusals/<reason>.py`), each a rule registered with
`@REFUSALS.register(reason, order=N)`: a plain function of `SourceFacts`, what a source's
config.json, its file list and, for a hub repository, the hub's answer about it say. The facts are
read without executing or downloading anything: a local folder's files, or the hub's model_info and
config.json (farm_toolchain/fetch_hf.py `hub_facts`); tests use crafted folders and recorded hub
answers. `check_source` raises `Refused` (bad input: exit 2, `--json` gives
{"refused": {"reason", "detail", "action"}}) at the first rule that refuses, in their order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from farm.errors import BadInput
from farm_common.registry import Registry

# Weight files an export reads (safetensors; PyTorch pickles are refused as remote-code risk
# elsewhere: torch.load of a .bin is code execution, so only safetensors count as full weights).
WEIGHT_SUFFIXES = (".safetensors",)
# Bytes per parameter of a build's peak resident memory, when this farm has recorded no export
# of a model of 10M+ parameters yet: the build of Gemma 3 270M (268.1M params; GGUF import,
# litert-torch export, quantize, package, gates) peaked at 6.96 GB (`/usr/bin/time -f %M` over the
# CLI and its toolchain process, 2026-12-01, this 2-core / 24 GB machine): 26 B/param.
DEFAULT_PEAK_BYTES_PER_PARAM = 26.0
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


class Refused(BadInput):
    """A source the farm will not convert, said before any work."""

    def __init__(self, reason: str, detail: str, action: str):
        self.reason, self.detail, self.action = reason, detail, action
        super().__init__(f"refused ({reason}): {detail}: {action}")

    def __reduce__(self):  # a flow's exception crosses Prefect's result serialization intact
        return (Refused, (self.reason, self.detail, self.action))

    def as_json(self) -> dict[str, Any]:
        return {"refused": {"reason": self.reason, "detail": self.detail, "action": self.action}}


@dataclass
class SourceFacts:
    where: str  # "folder /x" or "hub org/name@rev": named in every detail
    config: dict[str, Any]
    files: dict[str, int]  # relative name -> size in bytes (None-sized hub files count as 0)
    hub: dict[str, Any] | None = None  # {"gated": False | "auto" | "manual", "private": bool}
    has_token: bool = False
    families: dict[str, frozenset[str]] = field(default_factory=dict)  # family -> architectures
    available_memory: int | None = None  # bytes the machine can give an export
    peak_bytes_per_param: float | None = None  # the export's recorded peak per parameter
    peak_measured_on: str | None = None


# A rule: the source's facts -> (detail, action) when it refuses them, else None.
Rule = Callable[[SourceFacts], "tuple[str, str] | None"]


@dataclass(frozen=True)
class Refusal:
    reason: str
    rule: Rule
    order: int  # checked in this order; the first that refuses is the answer


REFUSALS: Registry[Refusal] = Registry(
    "refusal", "farm.refusals", make=lambda reason, rule, attrs: Refusal(reason, rule, **attrs),
    order=lambda r: r.order, support=("base",))


def check_source(facts: SourceFacts) -> None:
    for refusal in REFUSALS:
        found = refusal.rule(facts)
        if found is not None:
            raise Refused(refusal.reason, *found)














def estimated_params(files: dict[str, int], config: dict[str, Any]) -> int | None:
    """Parameters from the weight files' sizes and the config's dtype (safetensors headers are
    tiny next to the tensors)."""
    size = sum(s or 0 for n, s in files.items() if n.endswith(WEIGHT_SUFFIXES))
    if not size:
        return None
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "float32").removeprefix("torch.")
    return int(size / _DTYPE_BYTES.get(dtype, 4))


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, capped by a cgroup v2 memory.max when there is one."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            avail = min(avail or int(limit), int(limit))
    except OSError:
        pass
    return avail


def folder_facts(folder: Path, families: dict[str, frozenset[str]], config: dict[str, Any],
                 peak: tuple[float, str] | None = None) -> SourceFacts:
    files = {p.relative_to(folder).as_posix(): p.stat().st_size
             for p in folder.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.relative_to(folder).parts)}
    cfg = dict(config)
    index = next((folder / n for n in files if n.endswith(".safetensors.index.json")), None)
    if index is not None:
        import json

        try:
            cfg["_index_weight_map"] = sorted(set((json.loads(index.read_text()).get("weight_map") or {}).values()))
        except (OSError, ValueError):
            pass
    return SourceFacts(where=f"source folder {folder}", config=cfg, files=files, families=families,
                       available_memory=_memory_cap(), peak_bytes_per_param=peak[0] if peak else None,
                       peak_measured_on=peak[1] if peak else None)


def hub_facts(answer: dict[str, Any], config: dict[str, Any], families: dict[str, frozenset[str]],
              peak: tuple[float, str] | None = None) -> SourceFacts:
    """Facts from the hub's model_info answer ({"id", "sha", "gated", "private", "siblings":
    [{"rfilename", "size"}]}) and the repository's config.json: what the hub says before a weight
    is downloaded."""
    files = {s["rfilename"]: s.get("size") or 0 for s in answer.get("siblings") or []}
    return SourceFacts(where=f"hub repository {answer.get('id')}@{str(answer.get('sha') or '?')[:12]}",
                       config=config, files=files,
                       hub={"gated": answer.get("gated") or False, "private": bool(answer.get("private"))},
                       has_token=bool(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")),
                       families=families, available_memory=_memory_cap(),
                       peak_bytes_per_param=peak[0] if peak else None, peak_measured_on=peak[1] if peak else None)


def _memory_cap() -> int | None:
    """What a build may use: FARM_MAX_MEMORY_GB when set (a worker's share of its host), else the
    machine's available memory."""
    from farm.settings import get_settings

    cap = get_settings().max_memory_gb
    avail = available_memory()
    if cap:
        return min(int(cap * 2**30), avail) if avail else int(cap * 2**30)
    return avail
