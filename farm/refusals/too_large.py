"""Too large for this machine: the export's predicted peak memory (the toolchain's floor plus a
measured cost per parameter, farm/refusals/base.py) is more than the build may use. Said before any
work, instead of the kernel killing the conversion halfway; with the figure, the memory there is,
and the export option that would make it fit when there is one."""

from __future__ import annotations

from farm.refusals.base import LIGHTWEIGHT, REFUSALS, ExportMemory, SourceFacts, estimated_params


@REFUSALS.register("too_large", order=60)
def refuse(f: SourceFacts) -> tuple[str, str] | None:
    if f.available_memory is None:
        return None
    params = estimated_params(f.files, f.config)
    if not params:
        return None
    memory = f.memory or ExportMemory()
    need = memory.peak(params)
    if need <= f.available_memory:
        return None
    gib = 2**30
    detail = (f"{f.where}: about {params / 1e9:.2f}B parameters; the export is predicted to peak at "
              f"{need / gib:.1f} GiB ({memory.per_param(params)[1]}), and this build may use {f.available_memory / gib:.1f} GiB")
    lighter = memory.lighter
    if lighter is not None and lighter.peak(params) <= f.available_memory:
        return detail, (f"set export.options {LIGHTWEIGHT}: true in the config (predicted "
                        f"{lighter.peak(params) / gib:.1f} GiB, {lighter.per_param(params)[1]}; its float export's bytes differ "
                        "from the default's and lineage records the option), or build on a host with at least "
                        f"{need / gib * 1.1:.0f} GiB of memory")
    return detail, (f"build on a host with at least {need / gib * 1.1:.0f} GiB of memory (a worker in a larger "
                    "pool; FARM_MAX_MEMORY_GB is this worker's share), or a smaller model")
