"""`farm publish MODEL --to DIR`: the model repository a user uploads, written from lineage, and
`--check` of an existing one against what lineage says now.

The folder: README.md (the card under Hugging Face metadata), card.json, the chart(s), every current
`.litertlm` file by its card name (copied from the store, its sha256 verified while streaming, so a
damaged object never reaches the folder), litertlm_manifest.json, REPRODUCE.md and each file's
build config and recipe under reproduce/. Everything is made in a private folder first and moved in
file by file (each rename whole), so an interrupted publish leaves the previous files, never half of
one; files an earlier publish wrote that are no longer current (by the old manifest) are removed.

The check's reference is lineage and the card composed now, never the folder's own manifest: a
folder whose manifest was edited to match a swapped file is still refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from farm.cards.facts import model_facts
from farm.cards.publish import card_json, card_settings, compose_current, render_card
from farm.errors import BadInput
from farm.publishing.repo_files import MANIFEST, inputs_yaml, manifest, manifest_bytes, readme, reproduce
from farm.resources import Resources
from farm.store import hash_file


def _texts(facts: dict[str, Any], card: dict[str, Any], card_cfg: dict[str, Any], markdown: str,
           card_sha256: str) -> dict[str, bytes]:
    """{path in the repository: bytes} of the files made from lineage's text (not the bundles)."""
    out = {"README.md": readme(card, facts, card_cfg, markdown).encode(),
           MANIFEST: manifest_bytes(manifest(card["model"]["id"], card_sha256, facts)),
           "REPRODUCE.md": reproduce(card["model"]["id"], facts).encode()}
    for v in facts["variants"]:
        out |= {p: t.encode() for p, t in inputs_yaml(v).items()}
    return out


def write_folder(res: Resources, model: str, dest: Path, card_cfg: dict[str, Any] | None = None,
                 record: bool = True) -> dict[str, Any]:
    """Publish the model's card (as `farm card` does; `record` False: a dry run's folder, the card
    not stored or recorded) and write the repository to `dest`.
    {"model_id", "dir", "card_sha256", "files": [{path, sha256, size}], "removed": [...]}."""
    dest = dest.resolve()
    if dest.exists() and not dest.is_dir():
        raise BadInput(f"--to {dest}: exists and is not a folder; name a folder (it is created if missing)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.publish-", dir=dest.parent))
    try:
        out = render_card(res, model, card_cfg, out_dir=work / ".card", publish=record)
        out["card_sha256"] = hashlib.sha256(card_json(out["card"])).hexdigest()
        facts = model_facts(res, model)
        staged: dict[str, tuple[Path, str]] = {}  # path in the repository -> (staged file, its sha256)
        for name in sorted(os.listdir(work / ".card")):
            if name != "CARD.md":  # README.md carries it
                staged[name] = (work / ".card" / name, hash_file(work / ".card" / name)[0])
        for v in facts["variants"]:
            rec = v["lineage"]
            # get_to_path verifies the sha256 while streaming and leaves nothing on a mismatch, so
            # the bundle is not hashed again here.
            staged[rec["name"]] = (res.store.get_to_path(rec["sha256"], work / rec["name"]), rec["sha256"])
        for rel, data in _texts(facts, out["card"], card_settings(facts, card_cfg), out["markdown"],
                                out["card_sha256"]).items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
            staged[rel] = (work / rel, hashlib.sha256(data).hexdigest())
        old = _old_manifest_paths(dest)
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for rel, (path, sha) in sorted(staged.items()):
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
            written.append({"path": rel, "sha256": sha, "size": target.stat().st_size})
        removed = []
        for rel in sorted(old - set(staged)):
            if (dest / rel).is_file():
                (dest / rel).unlink()
                removed.append(rel)
        return {"model_id": out["model_id"], "dir": str(dest), "card_sha256": out["card_sha256"], "files": written,
                "removed": removed}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _old_manifest_paths(dest: Path) -> set[str]:
    """The paths a previous publish wrote (its manifest's files and their reproduce inputs)."""
    try:
        m = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return set()
    out = set()
    for f in m.get("files") or []:
        if isinstance(f, dict):
            out.add(str(f.get("file")))
            out |= {str(p) for p in (f.get("reproduce") or {}).values()}
    return {p for p in out if p and ".." not in Path(p).parts and not Path(p).is_absolute()}


def check_folder(res: Resources, model: str, dest: Path, card_cfg: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compare a published folder with what lineage says now: every current file present with its
    recorded sha256, no other .litertlm file, and card.json, README.md, the manifest, REPRODUCE.md and
    the reproduce inputs as publishing now would write them. {"model_id", "dir", "failures"}."""
    dest = dest.resolve()
    if not dest.is_dir():
        raise BadInput(f"--to {dest}: no such folder; publish into it first (`farm publish {model} --to {dest}`)")
    facts, card, markdown, _failures = compose_current(res, model, card_cfg)
    body = card_json(card)
    expected = {"card.json": body} | _texts(facts, card, card_settings(facts, card_cfg), markdown,
                                              hashlib.sha256(body).hexdigest())
    failures = []
    names = set()
    for v in facts["variants"]:
        rec = v["lineage"]
        names.add(rec["name"])
        path = dest / rec["name"]
        if not path.is_file():
            failures.append(f"{rec['name']}: missing (the card describes sha256 {rec['sha256']})")
        elif (got := hash_file(path)[0]) != rec["sha256"]:
            failures.append(f"{rec['name']}: sha256 {got} is not the {rec['sha256']} the card and lineage describe")
    for path in sorted(dest.glob("*.litertlm")):
        if path.name not in names:
            failures.append(f"{path.name}: not a current file of {card['model']['id']} (lineage's current files: "
                            f"{', '.join(sorted(names))})")
    for rel, data in expected.items():
        path = dest / rel
        if not path.is_file():
            failures.append(f"{rel}: missing")
        elif path.read_bytes() != data:
            failures.append(f"{rel}: differs from what lineage says now (publish again to update it)")
    return {"model_id": card["model"]["id"], "dir": str(dest), "failures": failures}
