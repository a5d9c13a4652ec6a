"""Artifacts and their provenance: a sha256 or prefix resolved, the whole lineage record of a file,
where its bytes are, the listing, the recorded sources and recipes another host rebuilds from, and
the family matrix."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from farm.errors import AmbiguousPrefix, NotASha, UnknownArtifact
from farm.lineage.models import (
    Artifact,
    ArtifactInput,
    DeviceResult,
    GateResult,
    LineageGeneration,
    Recipe,
    Section,
    Source,
    StageFailure,
    Toolchain,
)
from farm.lineage.queries.common import brief_of, prebuilt
from farm.lineage.queries.devices import device_results
from farm.lineage.queries.gates import gate_results, rechecks_for, siblings
from farm.lineage.queries.sections import SHARED_SHOWN, section_dict, sharers_statement, section_diff
from farm.lineage.queries.tuning import tune_dict
from farm_common.wire import FAILING


_HEX = re.compile(r"^[0-9a-f]{4,64}$")
ARTIFACT_KINDS = ("tokenizer", "float_tflite", "quantized_tflite", "tflite_part", "image_parts", "litertlm", "card", "card_file",
                  "release_delta")
EXPORTS_READ = 200  # newest float exports read for the export's recorded peak per parameter


@prebuilt
def _q_prefix() -> Any:
    return (select(Artifact.sha256).where(Artifact.sha256 >= bindparam("lo"), Artifact.sha256 < bindparam("hi"))
            .order_by(Artifact.sha256).limit(11))


@prebuilt
def _q_prefix_open() -> Any:
    return select(Artifact.sha256).where(Artifact.sha256 >= bindparam("lo")).order_by(Artifact.sha256).limit(11)


def resolve_sha(session: Session, text: str) -> str:
    """A full sha256 or a unique prefix of at least 4 hex digits -> the full sha256."""
    prefix = text.strip().lower()
    if not _HEX.match(prefix):
        raise NotASha(f"{text[:80]!r} is not a sha256 or a prefix of one (4 to 64 hex digits)")
    # A range on the primary key, not LIKE 'p%': SQLite's LIKE is case-insensitive and PostgreSQL's
    # collation is not C, so LIKE scanned the whole index on both (measured: linear in artifacts).
    upper = _next_prefix(prefix)
    rows = (session.scalars(_q_prefix(), {"lo": prefix, "hi": upper}) if upper is not None
            else session.scalars(_q_prefix_open(), {"lo": prefix})).all()
    if not rows:
        raise UnknownArtifact(f"no artifact with sha256 {prefix}…: list artifacts with `farm artifacts`")
    if len(rows) > 1:
        shown = ", ".join(r[:16] for r in rows[:10]) + (" …" if len(rows) > 10 else "")
        raise AmbiguousPrefix(f"sha256 prefix {prefix!r} is ambiguous: {shown}; give more digits", rows[:10])
    return rows[0]


def _next_prefix(prefix: str) -> str | None:
    """The smallest hex string of the same length greater than every string starting with `prefix`
    ("abf" -> "ac0"); None for "fff…" (no upper bound)."""
    n = int(prefix, 16) + 1
    if n >= 16 ** len(prefix):
        return None
    return f"{n:0{len(prefix)}x}"


def _parent(session: Session, sha: str, role: str) -> Artifact | None:
    return _parents(session, sha).get(role)


def _parents(session: Session, sha: str) -> dict[str, Artifact]:
    """{role: parent artifact} of one artifact, in one statement."""
    rows = session.execute(_q_parents(), {"sha": sha}).all()
    return {role: a for role, a in rows}


@prebuilt
def _q_parents() -> Any:
    from sqlalchemy.orm import joinedload

    # The parent's recipe in the same statement (a lineage record reads the quantized model's).
    return (select(ArtifactInput.role, Artifact).join(Artifact, Artifact.sha256 == ArtifactInput.input_sha256)
            .where(ArtifactInput.artifact_sha256 == bindparam("sha")).options(joinedload(Artifact.recipe)))


def lookup(session: Session, text: str) -> dict[str, Any]:
    """`lineage` of a sha256 or unique prefix, with the recipe search that chose it ("tune_search",
    a bundle's; None if none did): the artifact, its source, toolchain and newest search found in
    the statement that resolves the prefix (`resolve_sha` + `lineage` + `tune_searches` read them
    in three: two round trips of the ~14 every `farm api` lookup made)."""
    prefix = text.strip().lower()
    upper = _next_prefix(prefix) if _HEX.match(prefix) else None
    rows = (session.execute(_q_find(upper is not None), {"lo": prefix, "hi": upper}).all()
            if _HEX.match(prefix) else [])
    if len(rows) != 1:
        resolve_sha(session, text)  # raises what is wrong: not a sha, unknown, or ambiguous (with the candidates)
    art, previous, search_id = rows[0]
    rec = _lineage(session, art, previous)
    if art.kind == "litertlm":
        from farm.lineage.models import TuneSearch

        rec["tune_search"] = tune_dict(session.get(TuneSearch, search_id)) if search_id is not None else None
    return rec


@functools.lru_cache(maxsize=2)
def _q_find(bounded: bool) -> Any:
    from sqlalchemy.orm import aliased, joinedload

    from farm.lineage.models import TuneSearch

    search = (select(TuneSearch.id).where(TuneSearch.bundle_sha256 == Artifact.sha256)
              .order_by(TuneSearch.id.desc()).limit(1).scalar_subquery())
    previous = aliased(Artifact)  # the version it supersedes, if any (a model's chain)
    q = (select(Artifact, previous, search).outerjoin(previous, previous.sha256 == Artifact.supersedes_sha256)
         .where(Artifact.sha256 >= bindparam("lo")))
    if bounded:
        q = q.where(Artifact.sha256 < bindparam("hi"))
    return (q.options(joinedload(Artifact.source), joinedload(Artifact.toolchain))
            .order_by(Artifact.sha256).limit(2))


def lineage(session: Session, sha: str) -> dict[str, Any]:
    """The whole provenance of one artifact, walking its parents up to the source."""
    art = session.scalars(_q_artifact(), {"sha": sha}).first()
    if art is None:
        raise UnknownArtifact(f"no artifact with sha256 {sha}")
    return _lineage(session, art)


_UNREAD = object()


def _lineage(session: Session, art: Artifact, prev: Any = _UNREAD) -> dict[str, Any]:
    """The record of `art`; `prev`: the artifact it supersedes when the caller read it already."""
    sha = art.sha256

    # Walk up: bundle -(model)-> quantized -(float_model)-> float export, both levels in one statement.
    parents: dict[str, Artifact] = {}
    grandparents: dict[str, Artifact] = {}  # the "model" parent's own parents
    for role, parent, up_role, grand in session.execute(_q_two_levels(), {"sha": sha}):
        parents[role] = parent
        if up_role is not None:
            grandparents[up_role] = grand
    model = parents.get("model") if art.kind == "litertlm" else None
    quantized = model if model is not None and model.kind == "quantized_tflite" else (art if art.kind == "quantized_tflite" else None)
    if quantized is not None and quantized is not art:
        float_art = grandparents.get("float_model")
    elif quantized is art:
        float_art = parents.get("float_model")
    else:
        float_art = art if art.kind == "float_tflite" else None
    tokenizer = parents.get("tokenizer")
    recipe_holder = quantized or art

    src = art.source
    source = None
    if src is not None:
        source = {
            "id": src.id,
            "kind": src.kind,
            "name": src.name,
            "family": src.family,
            "repo_id": src.repo_id,
            "revision": src.revision,
            "path": src.path,
            "spec": src.spec,
            "files": src.files,
            "tokenizer_sha256": src.tokenizer_sha256,
            "generation": src.generation,
            "host": src.host,
        }

    float_export = None
    if float_art is not None:
        d = float_art.details or {}
        float_export = {
            **brief_of(float_art),
            "converter": d.get("converter"),
            "export_config": d.get("export_config"),
            "signatures": sorted((d.get("signatures") or {}).keys()),
            "toolchain_id": float_art.toolchain_id,
            # what the export needed: the too-large refusal's basis (farm/refusals/base.py)
            "peak_rss_bytes": d.get("peak_rss_bytes"),
            "memory_mode": d.get("memory_mode"),
        }
        if d.get("source_grid"):
            float_export["source_grid"] = d["source_grid"]
        if d.get("export_replayed"):  # kept by another farm under this stage's key (FARM_EXPORT_CACHE)
            float_export["export_replayed"] = True

    recipe = None
    if recipe_holder is not None and recipe_holder.recipe is not None:
        r = recipe_holder.recipe
        q = (quantized.details if quantized else {}) or {}
        recipe = {
            "name": r.name,
            "digest": r.digest,
            "body": r.body,
            "exceptions": q.get("exceptions"),
            "rules": q.get("rules"),
            "calibration": q.get("calibration"),
            "bytes_per_param": q.get("bytes_per_param"),
            "quantized_model": brief_of(quantized),
        }

    tc = art.toolchain
    toolchain = (
        {"id": tc.id, "python": tc.python_version, "packages": tc.packages} if tc is not None else None
    )

    # The sections, each with the artifact it is in its own right (e.g. the TFLite section == the
    # quantized model), in one statement. Which other files carry each section: at most
    # SHARED_SHOWN per section, by an index range (a section every bundle of an architecture
    # carries would otherwise list them all: linear in the farm's size); `shared_with_more` says
    # there are more.
    same: dict[str, Artifact] = {}
    sections = []
    prev_sections = []  # the superseded version's, for the diff: read in the same statement
    shas_read = [sha] + ([art.supersedes_sha256] if art.supersedes_sha256 else [])
    for sec, equal in session.execute(_q_sections(), {"shas": shas_read}):
        if sec.artifact_sha256 != sha:
            prev_sections.append(section_dict(sec))
            continue
        sections.append(section_dict(sec))
        if equal is not None:
            same[equal.sha256] = equal
    shas = [x["sha256"] for x in sections]
    # Every section's sharers in one statement: a UNION ALL of one LIMIT-ed index range per section
    # (a window function over all carriers would read every file of a section the whole farm shares:
    # measured 74 ms p50 on PostgreSQL at 100k; each LIMIT-ed range stops after SHARED_SHOWN + 1).
    sharers: dict[str, list[str]] = {}
    if shas:
        distinct = list(dict.fromkeys(shas))
        params = {"me": sha, **{f"s{i}": sec for i, sec in enumerate(distinct)}}
        for sec, other in session.execute(sharers_statement(len(distinct)), params):
            sharers.setdefault(sec, []).append(other)
    for x in sections:
        others = sharers.get(x["sha256"], [])
        x["shared_with"] = sorted(set(others[:SHARED_SHOWN]))
        x["shared_with_more"] = len(others) > SHARED_SHOWN
        x["equals_artifact"] = brief_of(same.get(x["sha256"]))

    previous = None
    if art.supersedes_sha256:
        if prev is _UNREAD:
            prev = session.get(Artifact, art.supersedes_sha256)
        previous = {
            **brief_of(prev),
            "created_at": prev.created_at.isoformat(),
            "sections": section_diff(prev_sections, sections),
        }
    later = session.scalars(_q_later(), {"sha": sha}).all()

    gate_shas = [sha] + ([float_art.sha256] if float_art is not None and float_art.sha256 != sha else [])
    return {
        "sha256": art.sha256,
        "kind": art.kind,
        "name": art.name,
        "size": art.size,
        "uri": art.uri,
        "imported": art.imported,
        "host": art.host,
        "created_at": art.created_at.isoformat(),
        "details": art.details,
        "source": source,
        "float_export": float_export,
        "recipe": recipe,
        "tokenizer": brief_of(tokenizer) or (
            {"sha256": src.tokenizer_sha256} if src is not None and src.tokenizer_sha256 else None
        ),
        "toolchain": toolchain,
        "sections": sections,
        "previous": previous,
        "superseded_by": list(later),
        "chain": {"chain": art.chain, "seq": art.chain_seq} if art.chain else None,
        "locations": locations(session, sha),
        "gates": gate_results(session, gate_shas),
        "rechecks": rechecks_for(session, sha),
        "siblings": siblings(session, sha, limit=SHARED_SHOWN),
        "devices": device_results(session, sha),
    }


@prebuilt
def _q_two_levels() -> Any:
    """An artifact's parents (each with its recipe), and the parents of its "model" parent."""
    from sqlalchemy.orm import aliased, joinedload

    up, grand = aliased(ArtifactInput), aliased(Artifact)
    return (select(ArtifactInput.role, Artifact, up.role, grand)
            .join(Artifact, Artifact.sha256 == ArtifactInput.input_sha256)
            .outerjoin(up, (up.artifact_sha256 == Artifact.sha256) & (ArtifactInput.role == "model"))
            .outerjoin(grand, grand.sha256 == up.input_sha256)
            .where(ArtifactInput.artifact_sha256 == bindparam("sha"))
            .options(joinedload(Artifact.recipe)))


@prebuilt
def _q_artifact() -> Any:
    from sqlalchemy.orm import joinedload

    # Source and toolchain in the same statement (each lazy load was a round trip).
    return (select(Artifact).where(Artifact.sha256 == bindparam("sha"))
            .options(joinedload(Artifact.source), joinedload(Artifact.toolchain)))


@prebuilt
def _q_sections() -> Any:
    return (select(Section, Artifact).outerjoin(Artifact, Artifact.sha256 == Section.sha256)
            .where(Section.artifact_sha256.in_(bindparam("shas", expanding=True)))
            .order_by(Section.artifact_sha256, Section.idx))


@prebuilt
def _q_later() -> Any:
    return select(Artifact.sha256).where(Artifact.supersedes_sha256 == bindparam("sha"))


def locations(session: Session, sha: str) -> list[dict[str, Any]]:
    """Every store the bytes were put in, oldest first."""
    rows = session.scalars(_q_locations(), {"sha": sha})
    return [{"store_url": r.store_url, "uri": r.uri, "recorded_at": r.recorded_at.isoformat()} for r in rows]


@prebuilt
def _q_locations() -> Any:
    from farm.lineage.models import ArtifactLocation

    return (select(ArtifactLocation).where(ArtifactLocation.artifact_sha256 == bindparam("sha"))
            .order_by(ArtifactLocation.recorded_at))


def named_objects(session: Session) -> dict[str, list[str]]:
    """Every store object lineage names: each artifact, and each file of each recorded source
    (sha256 -> what names it)."""
    from farm.lineage.models import Source

    named: dict[str, list[str]] = {}
    for sha, kind, name in session.execute(select(Artifact.sha256, Artifact.kind, Artifact.name)):
        named.setdefault(sha, []).append(f"{kind} {name or ''}".strip())
    for sid, sname, files in session.execute(select(Source.id, Source.name, Source.files)):
        for f in files or []:
            named.setdefault(f["sha256"], []).append(f"source file {f['path']} of {sname} ({sid[:12]})")
    return named


def source_file_copies(session: Session) -> dict[str, list[Path]]:
    """sha256 -> the recorded folder copies of that source file (where a repair may take it from)."""
    from farm.lineage.models import Source

    out: dict[str, list[Path]] = {}
    for path, files in session.execute(select(Source.path, Source.files)):
        for f in files or []:
            if path:
                out.setdefault(f["sha256"], []).append(Path(path) / f["path"])
    return out


def list_artifacts(session: Session, kind: str | None = None, limit: int = 50, model: str | None = None,
                   recipe: str | None = None) -> list[dict[str, Any]]:
    """Newest first. `model`: a model id (its bundles' and cards' version chains); `recipe`: a
    recipe name or digest."""
    q = select(Artifact).order_by(Artifact.created_at.desc()).limit(limit)
    if kind:
        q = q.where(Artifact.kind == kind)
    if model:
        q = q.where(Artifact.model_id == model.lower())
    if recipe:
        digests = select(Recipe.digest).where((Recipe.name == recipe) | (Recipe.digest == recipe))
        q = q.where(Artifact.recipe_digest.in_(digests))
    return [
        {**brief_of(a), "created_at": a.created_at.isoformat(), "imported": a.imported}
        for a in session.scalars(q)
    ]


def lineage_generation(session: Session) -> int:
    """The lineage generation (farm/lineage/db.py): it moves when, and only when, a transaction that
    changed something lineage shows has committed."""
    return session.scalar(_q_generation()) or 0


@prebuilt
def _q_generation() -> Any:
    return select(LineageGeneration.n).where(LineageGeneration.id == 1)


def largest_export_peaks(session: Session, mode: str) -> dict[str, tuple[int, int, str]]:
    """Per regime ("small": a float export under 2 GiB, "large": 2 GiB or more, which the converter
    writes another way), (peak resident bytes, source parameters, sha256) of the recorded float
    export of the largest model (10M+ parameters: a small model's peak is mostly the toolchain's
    fixed cost) made with the memory mode `mode` (its details' "memory_mode": exports recorded
    before the mode was, or made another way, predict nothing about this one). Every build asks, so
    only the newest EXPORTS_READ exports are read (three columns, no ORM objects): the figure
    follows the toolchain a farm runs now, and the cost does not grow with the farm."""
    best: dict[str, tuple[int, int, str]] = {}
    rows = session.execute(select(Artifact.sha256, Artifact.size, Artifact.details)
                           .where(Artifact.kind == "float_tflite")
                           .order_by(Artifact.created_at.desc()).limit(EXPORTS_READ))
    for sha, size, d in rows:
        d = d or {}
        peak, params = d.get("peak_rss_bytes"), d.get("source_params")
        if d.get("memory_mode") != mode or not peak or not params or params < 10_000_000:
            continue
        regime = "large" if (size or 0) >= 2**31 else "small"
        if regime not in best or params > best[regime][1]:
            best[regime] = (peak, params, sha)
    return best


def source_tokenizer(session: Session, sha: str) -> str | None:
    """The sha256 of the tokenizer.json recorded with the source of this artifact."""
    from farm.lineage.models import Source

    return session.scalars(select(Source.tokenizer_sha256).join(Artifact, Artifact.source_id == Source.id)
                           .where(Artifact.sha256 == sha)).first()


def artifact_details(session: Session, sha: str) -> dict[str, Any]:
    """One artifact's recorded details ({} for an unknown sha or none recorded)."""
    a = session.get(Artifact, sha)
    return dict(a.details or {}) if a is not None else {}


def artifact_brief(session: Session, sha: str) -> dict[str, Any] | None:
    """{sha256, kind, name, size, uri, source_id, details} of one artifact, or None."""
    a = session.get(Artifact, sha)
    if a is None:
        return None
    return {**brief_of(a), "source_id": a.source_id, "details": a.details or {}}


def family_matrix(session: Session) -> list[dict[str, Any]]:
    """Per (family, model, recipe), the newest outcome of building it: its newest bundle (the
    newest result of each gate on it, each device's newest result, the litert-torch and litert-lm
    that made and measured it) or, where a build failed in a stage after it, that failure (stage,
    tool, version, the tool's reason, the log). Oldest family first, then model, then recipe."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    bundles = session.execute(
        select(Source.family, Artifact.model_id, Recipe.name, Artifact.sha256, Artifact.size, Artifact.created_at,
               Toolchain.packages)
        .join(Source, Artifact.source_id == Source.id).join(Recipe, Artifact.recipe_digest == Recipe.digest)
        .join(Toolchain, Artifact.toolchain_id == Toolchain.id, isouter=True)
        .where(Artifact.kind == "litertlm", Artifact.model_id.is_not(None)).order_by(Artifact.created_at))
    for family, model, recipe, sha, size, at, packages in bundles:
        rows[(family, model, recipe)] = {
            "family": family, "model": model, "recipe": recipe, "outcome": "bundle", "sha256": sha, "size": size,
            "at": at.isoformat(), "litert_torch": (packages or {}).get("litert-torch")}
    failures = session.execute(select(StageFailure, Toolchain.packages)
                               .join(Toolchain, StageFailure.toolchain_id == Toolchain.id, isouter=True)
                               .order_by(StageFailure.id))
    for f, packages in failures:
        key = (f.family, f.model_id, f.recipe_name or "")
        if key in rows and rows[key]["at"] > f.created_at.isoformat():
            continue
        rows[key] = {"family": f.family, "model": f.model_id, "recipe": f.recipe_name, "outcome": "failed",
                     "stage": f.stage, "tool": f.tool, "tool_version": f.tool_version, "error": f.error,
                     "log": f.log_path, "at": f.created_at.isoformat(),
                     "litert_torch": (packages or {}).get("litert-torch")}
    shas = [r["sha256"] for r in rows.values() if r["outcome"] == "bundle"]
    gates: dict[str, dict[str, dict[str, Any]]] = {}
    for g in session.scalars(select(GateResult).where(GateResult.artifact_sha256.in_(shas)).order_by(GateResult.id)):
        gates.setdefault(g.artifact_sha256, {})[g.gate] = {
            "status": g.status, "runtime_version": g.runtime_version,
            "finding": (g.findings or [None])[0] if g.status in (*FAILING, "warn") else None}
    devices: dict[str, dict[str, dict[str, Any]]] = {}
    for d in session.scalars(select(DeviceResult).where(DeviceResult.artifact_sha256.in_(shas))
                             .order_by(DeviceResult.id)):
        devices.setdefault(d.artifact_sha256, {})[f"{d.device_id}/{d.accelerator}"] = {
            "status": d.status, "runtime_version": d.runtime_version, "failure_class": d.failure_class}
    out = []
    for key in sorted(rows):
        row = rows[key]
        if row["outcome"] == "bundle":
            row["gates"] = gates.get(row["sha256"], {})
            row["devices"] = devices.get(row["sha256"], {})
            versions = {g["runtime_version"] for g in row["gates"].values() if g["runtime_version"]}
            row["litert_lm"] = ", ".join(sorted(versions)) or None
        out.append(row)
    return out


def recorded_source(session: Session, kind: str, *, repo_id: str | None = None, revision: str | None = None,
                    folder_name: str | None = None) -> dict[str, Any] | None:
    """The newest recorded source of `kind` that another host may rebuild from the store instead of
    making or fetching it again: a hub source by repository and resolved commit, a generated one by
    its folder's name (the digest of its spec and toolchain, farm/stages/source.py)."""
    q = select(Source).where(Source.kind == kind).order_by(Source.created_at.desc())
    if repo_id is not None:
        q = q.where(Source.repo_id == repo_id, Source.revision == revision)
    if folder_name is not None:
        q = q.where(Source.path.like(f"%/{folder_name}"))
    row = session.scalars(q.limit(1)).first()
    return None if row is None else {"id": row.id, "files": row.files, "host": row.host, "path": row.path}


def recorded_recipe(session: Session, name: str) -> Any:
    """The newest recipe recorded under `name`, as a farm.recipes.Recipe: what a host without the YAML
    (another checkout; `farm tune` wrote it on another host) builds with. None where none is
    recorded, or where this code reads the recorded body otherwise (its digest differs: not that
    recipe)."""
    from farm.recipes import Recipe as RecipeSpec

    row = session.scalars(select(Recipe).where(Recipe.name == name).order_by(Recipe.created_at.desc()).limit(1)).first()
    if row is None:
        return None
    rcp = RecipeSpec.model_validate(row.body)
    return rcp if rcp.digest() == row.digest else None
