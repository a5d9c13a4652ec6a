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
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from farm.errors import BadInput
from farm_common.registry import Registry

# Weight files an export reads (safetensors; PyTorch pickles are refused as remote-code risk
# elsewhere: torch.load of a .bin is code execution, so only safetensors count as full weights).
WEIGHT_SUFFIXES = (".safetensors",)
# An export's peak resident memory, predicted before any work as the toolchain's resident floor
# plus a cost per parameter (issue 22; benchmarks/README.md "Conversion memory" has the runs). The
# floor is a toolchain process with torch and litert-torch imported. The converter writes a float
# export of 2 GiB or more another way ("Module size is greater than 2GB": its constants outside the
# flatbuffer builder), and its peak follows another line, so the cost is per regime: the float32
# export's size (4 bytes per parameter) below or above 2 GiB. Measured with benchmarks/
# convert_memory.py on Qwen3.5 shapes (random weights, the real vocabulary): the 4-layer 0.8B shape
# (334M parameters) for "small", the full-depth 0.8B (733M) and 2B for "large"; "once" is the farm's export
# holding the weights once (farm_toolchain/weights_once.py; the other families' exportables wrap the
# loaded model without a copy, so the mode names them too, though their figures are not measured
# yet), "once+lightweight" the same with litert-torch's experimental_lightweight_conversion (the
# qwen3_5 family's default). A recorded
# export of a 10M+ model made the same way, in the same regime, replaces the default
# (recorded_peak, below).
# The floor: the smallest export peak recorded here (0.71 GiB, a tiny Llama; the tiny Qwen3.5's is
# 0.77), so a cap below it is refused and one just above it is still the hard cap's to enforce.
EXPORT_FLOOR_BYTES = int(0.70 * 2**30)
LARGE_EXPORT_BYTES = 2**31
# once+lightweight, large: least squares through the floor over the full-depth 0.8B (733M, 3.85 GiB)
# and 2B (1.84B, 7.98 GiB): predicts them 5.7 % under and 1.1 % over.
PEAK_BYTES_PER_PARAM = {("once", "small"): 20.0, ("once", "large"): 14.2,
                        ("once+lightweight", "small"): 11.9, ("once+lightweight", "large"): 4.29}
LIGHTWEIGHT = "experimental_lightweight_conversion"
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
    memory: "ExportMemory | None" = None  # how this build's export peak is predicted (None: the default)


def memory_mode(options: dict[str, Any]) -> str:
    """How an export holds memory, as recorded with each float export: the farm's default, or
    with litert-torch's lightweight conversion (a recorded peak predicts only exports made the same way)."""
    return "once+lightweight" if options.get(LIGHTWEIGHT) else "once"


def export_regime(params: int) -> str:
    """"large" when a float32 export of `params` parameters is 2 GiB or more (the converter writes
    those another way), else "small"."""
    return "large" if 4 * params >= LARGE_EXPORT_BYTES else "small"


@dataclass(frozen=True)
class ExportMemory:
    """What the too-large refusal predicts an export's peak from, for the way the config exports
    (`mode`): per regime, bytes per parameter above the toolchain's floor and what they were
    measured on (`measured`: from lineage; a regime it lacks takes the farm's figure). `lighter`,
    when the config does not ask for lightweight conversion, is the same prediction with it (the
    option a refusal names when that would fit)."""
    mode: str = "once"
    measured: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    lighter: "ExportMemory | None" = None

    def per_param(self, params: int) -> tuple[float, str]:
        regime = export_regime(params)
        if regime in self.measured:
            return self.measured[regime]
        per = PEAK_BYTES_PER_PARAM[(self.mode, regime)]
        return per, (f"the farm's figure for a {'float export of 2 GiB or more' if regime == 'large' else 'float export under 2 GiB'}"
                     f"{' with lightweight conversion' if self.mode == 'once+lightweight' else ''}: "
                     f"{EXPORT_FLOOR_BYTES / 2**30:.2f} GiB + {per:g} B/param")

    def peak(self, params: int) -> int:
        return int(EXPORT_FLOOR_BYTES + self.per_param(params)[0] * params)


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
                 memory: ExportMemory | None = None) -> SourceFacts:
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
                       available_memory=_memory_cap(), memory=memory)


def hub_facts(answer: dict[str, Any], config: dict[str, Any], families: dict[str, frozenset[str]],
              memory: ExportMemory | None = None) -> SourceFacts:
    """Facts from the hub's model_info answer ({"id", "sha", "gated", "private", "siblings":
    [{"rfilename", "size"}]}) and the repository's config.json: what the hub says before a weight
    is downloaded."""
    files = {s["rfilename"]: s.get("size") or 0 for s in answer.get("siblings") or []}
    return SourceFacts(where=f"hub repository {answer.get('id')}@{str(answer.get('sha') or '?')[:12]}",
                       config=config, files=files,
                       hub={"gated": answer.get("gated") or False, "private": bool(answer.get("private"))},
                       has_token=bool(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")),
                       families=families, available_memory=_memory_cap(), memory=memory)


def _memory_cap() -> int | None:
    """What a build may use: FARM_MAX_MEMORY_GB when set (a worker's share of its host), else the
    machine's available memory."""
    from farm.settings import get_settings

    cap = get_settings().max_memory_gb
    avail = available_memory()
    if cap:
        return min(int(cap * 2**30), avail) if avail else int(cap * 2**30)
    return avail


def recorded_peak(res: Any, options: dict[str, Any] | None = None) -> "ExportMemory":
    """How the too-large refusal predicts this build's export peak (ExportMemory): per regime, bytes
    per parameter above the toolchain's floor, from the newest recorded export of the largest model
    made the way `options` (the export options, family defaults included) make it, else the farm's
    figures; with the lightweight-conversion prediction beside it when `options` do not ask for that."""
    from farm.lineage.queries.artifacts import largest_export_peaks

    def for_mode(mode: str) -> ExportMemory:
        with res.db.session() as s:
            found = largest_export_peaks(s, mode)
        return ExportMemory(mode, {
            regime: (max(peak - EXPORT_FLOOR_BYTES, 0) / params,
                     f"measured on the export {sha[:12]} of {params / 1e6:.0f}M parameters, peak {peak / 2**30:.2f} GiB")
            for regime, (peak, params, sha) in found.items()})

    mode = memory_mode(options or {})
    memory = for_mode(mode)
    if mode != "once+lightweight":
        memory = dataclasses.replace(memory, lighter=for_mode("once+lightweight"))
    return memory
