"""Too large for this machine by the export's recorded peak memory per parameter."""

from __future__ import annotations

from farm.refusals.base import DEFAULT_PEAK_BYTES_PER_PARAM, REFUSALS, SourceFacts, estimated_params


@REFUSALS.register("too_large", order=60)
def refuse(f: SourceFacts) -> tuple[str, str] | None:
    if f.available_memory is None:
        return None
    params = estimated_params(f.files, f.config)
    if not params:
        return None
    per = f.peak_bytes_per_param or DEFAULT_PEAK_BYTES_PER_PARAM
    need = params * per
    if need <= f.available_memory:
        return None
    basis = f.peak_measured_on or f"the farm's default {DEFAULT_PEAK_BYTES_PER_PARAM:g} B/param"
    return (f"{f.where}: about {params / 1e9:.2f}B parameters; the export peaks at ~{per:.1f} bytes per parameter "
            f"({basis}) = {need / 2**30:.1f} GiB, and this machine has {f.available_memory / 2**30:.1f} GiB available",
            f"build on a host with at least {need / 2**30 * 1.1:.0f} GiB of memory (a worker in a larger pool), "
            "or a smaller model")
