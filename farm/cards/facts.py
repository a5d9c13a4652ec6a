"""What a model card may say, read from lineage: the current file of each variant of a model, with
every measurement that describes it — its own, or carried over from an earlier file of the same name
whose measured sections this file carries byte for byte (else marked stale, with what changed).

A card is one more reader of lineage: it asks named questions (farm/lineage/queries/) and never
holds a claim that lineage does not.
"""

from __future__ import annotations

from typing import Any

from farm.model_ids import model_id
from farm.errors import BadInput
from farm_common.gates import GATES
from farm.lineage.queries.artifacts import lineage

#: The sections a device benchmark's figures depend on (speed and memory are the model graph's).
from farm.lineage.queries.cards import current_bundles, previous_files, text_twin

#: The sections a device benchmark's figures depend on (speed and memory are the model graph's).
from farm.lineage.queries.tuning import tune_searches

#: The sections a device benchmark's figures depend on (speed and memory are the model graph's).
DEVICE_SECTIONS = ("TFLiteModel",)


def _sections(rec: dict[str, Any]) -> dict[str, str]:
    """{section type: sha256} (the first of each type)."""
    out: dict[str, str] = {}
    for s in rec["sections"]:
        out.setdefault(s["type"], s["sha256"])
    return out


def carried(current: dict[str, Any], measured_on: dict[str, Any], depends_on: tuple[str, ...]) -> dict[str, Any]:
    """How a measurement on `measured_on` relates to `current`: the same file; another file whose
    sections `depends_on` are byte-identical (the row stands, saying so); or stale, with what changed."""
    if measured_on["sha256"] == current["sha256"]:
        return {"basis": "this file", "stale": False, "changed": []}
    now, then = _sections(current), _sections(measured_on)
    changed = [t for t in depends_on if now.get(t) != then.get(t)]
    if depends_on and not changed:
        return {"basis": "identical sections", "stale": False, "changed": [],
                "sections": list(depends_on)}
    return {"basis": "another file", "stale": True, "changed": changed or ["the file (no section dependence declared)"]}


#: Source files whose bytes are the chat template (a template change is named as such).
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")


def inputs_of(rec: dict[str, Any]) -> dict[str, Any]:
    """What a file was made from, as comparable values (for the card's Changes): the source, its
    chat template files, the tokenizer, the recipe, the float export and its options, the packaging
    metadata and the toolchain's converter versions."""
    src = rec.get("source") or {}
    files = {f.get("path"): f.get("sha256") for f in src.get("files") or [] if isinstance(f, dict)}
    fe = rec.get("float_export") or {}
    packages = (rec.get("toolchain") or {}).get("packages") or {}
    details = rec.get("details") or {}
    return {
        "source": src.get("id"),
        "template": {p: files[p] for p in TEMPLATE_FILES if p in files} or None,
        "tokenizer": (rec.get("tokenizer") or {}).get("sha256"),
        "recipe": (rec.get("recipe") or {}).get("digest"),
        "recipe_name": (rec.get("recipe") or {}).get("name"),
        "export": fe.get("sha256"),
        "export_options": fe.get("export_config"),
        "metadata": details.get("metadata"),
        "toolchain": {k: packages.get(k) for k in ("litert-torch", "ai-edge-quantizer", "litert-lm-builder")},
    }


def _latest_by(rows: list[dict[str, Any]], key) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for r in rows:  # oldest first: the newest wins
        out[key(r)] = r
    return out


def variant_facts(session, sha: str) -> dict[str, Any]:
    """One current file: its lineage, and its gate and device rows with provenance."""
    rec = lineage(session, sha)
    history = [rec] + [lineage(session, p) for p in previous_files(session, sha, limit=5)]
    float_sha = (rec.get("float_export") or {}).get("sha256")

    gates: dict[tuple, dict[str, Any]] = {}
    for older in reversed(history):  # the newest file last: its own results win
        for g in older["gates"]:
            if g.get("recheck_id") is not None:
                continue
            spec = GATES.load().get(g["gate"])
            if g["artifact_sha256"] == float_sha or (spec and spec.target == "float"):
                where = {"basis": "this file's float export", "stale": g["artifact_sha256"] != float_sha,
                         "changed": [] if g["artifact_sha256"] == float_sha else ["the float export"]}
            else:
                where = carried(rec, older, spec.sections if spec else ())
            # One row per gate, runtime release and CPU class: the classes are told apart (issue 34).
            gates[(g["gate"], g["runtime_version"], g.get("cpu_class"))] = {**g, "measured_on": older["sha256"],
                                                         "measured_on_created": older["created_at"], **where}
    devices: dict[tuple, dict[str, Any]] = {}
    for older in reversed(history):
        for d in older["devices"]:
            where = carried(rec, older, DEVICE_SECTIONS)
            devices[(d["device_id"], d["accelerator"], d["prefill_tokens"])] = {
                **d, "measured_on": older["sha256"], "measured_on_created": older["created_at"], **where}
    searches = tune_searches(session, bundle_sha256=sha, limit=1)
    image = (rec.get("details") or {}).get("image")
    return {"lineage": rec, "gates": list(gates.values()), "devices": list(devices.values()),
            # An image bundle's text build (same source and recipe), whose sections its card compares.
            "text_twin": text_twin(session, sha) if image else None,
            # The recipe search that chose this file (farm tune), if one did.
            "search": searches[0] if searches else None,
            # The raw measurements per file, for the mechanical checks to re-derive every claim from
            # (a check must not inherit a defect of the carry-over logic above).
            "history": [{"sha256": h["sha256"], "size": h["size"], "created_at": h["created_at"],
                         "sections": _sections(h), "devices": h["devices"], "gates": h["gates"],
                         "section_rows": [{k: x[k] for k in ("type", "sha256", "size")} for x in h["sections"]],
                         "inputs": inputs_of(h), "first": h.get("previous") is None} for h in history]}


def model_facts(res, model: str) -> dict[str, Any]:
    """`model`: the build config's name (or its model id)."""
    mid = model_id(model)
    with res.db.session() as s:
        shas = current_bundles(s, mid)
        if not shas:
            raise BadInput(f"no farm-built bundle of a model named {model!r} (model id {mid!r}): build its "
                           "config first (`farm card` takes the build config's name)")
        # Targets no recipe met (farm tune, status not_met): the measured frontier is a result too.
        unmet = [t for t in tune_searches(s, model_id=mid, limit=20) if t["status"] == "not_met"][:3]
        return {"model": mid, "variants": [variant_facts(s, sha) for sha in shas], "unmet_searches": unmet}
