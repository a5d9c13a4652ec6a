"""Adopt a .litertlm the farm did not build (`farm import`): store it, hash its sections, and record
the source it claims to come from, so every gate can run on it and lineage links it to farm-built
files that share its sections byte for byte."""

from __future__ import annotations

from pathlib import Path

from farm.config import BuildConfig
from farm.errors import BadInput
from farm.lineage.record import record_stored, record_sections
from farm.litertlm import hash_sections, read_header
from farm.resources import Resources
from farm.progress import Progress, stderr_progress
from farm.stages.source import resolve_source


def adopt_bundle(res: Resources, path: Path, cfg: BuildConfig, progress: Progress = stderr_progress) -> dict:
    header = read_header(path)  # not a LiteRT-LM file -> BadInput before anything is stored
    if not any(sec.type == "TFLiteModel" and sec.size > 0 for sec in header.sections):
        kinds = ", ".join(sorted({sec.type for sec in header.sections})) or "none"
        raise BadInput(f"{path} has no TFLite model section (sections: {kinds}): it is not a bundle the runtime "
                       "can run, so there is nothing to import")
    source = resolve_source(res, cfg, progress)
    ref = res.store.put_file(path)
    file_sha, _size, sections = hash_sections(res.store.open_verified_path(ref.sha256), header=None)
    with res.db.session() as s:
        record_stored(
            s, ref, "litertlm", name=path.name, source_id=source.source_id, imported=True,
            # The source's tokenizer.json is what the file *claims*; the tokenizer gate checks it.
            inputs={"tokenizer": source.tokenizer.sha256},
            details={
                "imported_from": str(path.resolve()),
                "claimed_source": cfg.source.model_dump(mode="json"),
                "header_version": list(header.version),
                "system_metadata": {k: v for k, v in header.system_metadata.items() if isinstance(v, (str, int, float, bool))},
                "metadata": {"prefill_lengths": cfg.export.prefill_lengths, "cache_length": cfg.export.cache_length},
                "gates_config": cfg.gates.model_dump(mode="json"),
            },
        )
        record_sections(
            s, ref.sha256,
            [{"index": sec.index, "type": sec.type, "offset": sec.offset, "size": sec.size, "sha256": d}
             for sec, d in sections],
        )
    return {"sha256": ref.sha256, "uri": ref.uri, "size": ref.size, "source_id": source.source_id,
            "sections": [{"type": sec.type, "sha256": d} for sec, d in sections]}
