"""The text files of a published model repository, from lineage (pure: no I/O): README.md (the card
under Hugging Face model-card metadata), litertlm_manifest.json (every file's sha256 and lineage
record) and REPRODUCE.md (the exact inputs and command that make each file again), with each file's
build config and recipe as YAML beside it."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from farm import __version__
from farm.cards.classes import verified_tags
from farm.cards.runtimes import release_rows, summary

MANIFEST = "litertlm_manifest.json"
MANIFEST_SCHEMA = "litertlm-farm/manifest/1"
# Hugging Face license identifiers the farm passes through as they are; any other text is
# `license: other` with the text as `license_name` (the hub rejects an unknown identifier).
HF_LICENSES = frozenset({
    "apache-2.0", "mit", "openrail", "bigscience-openrail-m", "creativeml-openrail-m", "bigcode-openrail-m",
    "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd", "bsd-2-clause", "bsd-3-clause", "cc0-1.0", "cc-by-4.0",
    "cc-by-sa-4.0", "cc-by-nc-4.0", "cc-by-nc-sa-4.0", "gpl-3.0", "lgpl-3.0", "agpl-3.0", "mpl-2.0", "unlicense",
    "llama2", "llama3", "llama3.1", "llama3.2", "llama3.3", "llama4", "gemma", "other",
})


def reproduce_paths(rec: dict[str, Any]) -> dict[str, str]:
    """Where a file's build config and recipe lie in the repository."""
    stem = rec["name"].removesuffix(".litertlm")
    recipe = (rec.get("recipe") or {}).get("name") or "recipe"
    # One current file per (model, recipe): the recipe's name is unique among them.
    return {"config": f"reproduce/{stem}.config.yaml", "recipe": f"reproduce/{recipe}.yaml"}  # a recipe file is named for its recipe


def _license(card: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    text = str(card["model"].get("license") or "")
    if text in HF_LICENSES:
        return {"license": text}
    if (rec.get("source") or {}).get("kind") == "generated":
        return {"license": "other", "license_name": "generated-test-model"}
    slug = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-")[:60] or "not-recorded"
    return {"license": "other", "license_name": slug}


def base_model(rec: dict[str, Any], card_cfg: dict[str, Any]) -> str | None:
    if card_cfg.get("base_model"):
        return card_cfg["base_model"]
    src = rec.get("source") or {}
    return src.get("repo_id") if src.get("kind") == "hf" else None


def front_matter(card: dict[str, Any], facts: dict[str, Any], card_cfg: dict[str, Any]) -> dict[str, Any]:
    """Hugging Face model-card metadata: license and base model from the source, the task, the
    library, and tags for the family, each file's recipe, each backend a current file was
    verified on and each CPU class every current file passed on (only those: a tag is a claim too)."""
    first = facts["variants"][0]["lineage"]
    backends = sorted({d["accelerator"] for v in facts["variants"] for d in v["devices"]
                       if d["status"] == "verified" and not d["stale"]})
    recipes = [(v["lineage"].get("recipe") or {}).get("name") for v in facts["variants"]]
    tags = ["litert-lm", "litertlm", "on-device", card["model"]["family"],
            *[f"recipe:{r}" for r in recipes if r], *[f"backend:{b}" for b in backends],
            *verified_tags(facts)]  # the CPU classes every current file passed on, and only those
    meta: dict[str, Any] = _license(card, first)
    if (bm := base_model(first, card_cfg)) is not None:
        meta["base_model"] = bm
    meta |= {"pipeline_tag": card["model"]["task"], "library_name": "litert-lm",
             "tags": list(dict.fromkeys(t for t in tags if t and t != "unknown"))}
    return meta


def readme(card: dict[str, Any], facts: dict[str, Any], card_cfg: dict[str, Any], markdown: str) -> str:
    """The card with Hugging Face metadata in place of edge-compat's front matter (whose keys stay,
    below the hub's, except its free-text license, which the card's table still prints)."""
    body, edge = markdown, {}
    if markdown.startswith("---\n"):
        head, _, body = markdown[4:].partition("\n---\n")
        edge = yaml.safe_load(head) or {}
    meta = front_matter(card, facts, card_cfg) | {k: v for k, v in edge.items() if k != "license"}
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n\n" + body.lstrip("\n")


def file_record(v: dict[str, Any]) -> dict[str, Any]:
    """One file's manifest entry: its bytes, where they came from, and the releases that gated it."""
    rec = v["lineage"]
    src = rec.get("source") or {}
    fe = rec.get("float_export") or {}
    rows = release_rows(v)
    return {
        "file": rec["name"], "sha256": rec["sha256"], "size": rec["size"], "created_at": rec["created_at"],
        "chain": (rec.get("chain") or {}).get("chain"), "chain_seq": (rec.get("chain") or {}).get("seq"),
        "previous_sha256": (rec.get("previous") or {}).get("sha256"),
        "source": {k: src.get(k) for k in ("id", "kind", "repo_id", "revision", "family", "spec")},
        "float_export": {"sha256": fe.get("sha256"), "export_config": fe.get("export_config")},
        "recipe": {k: (rec.get("recipe") or {}).get(k) for k in ("name", "digest")},
        "tokenizer_sha256": (rec.get("tokenizer") or {}).get("sha256"),
        "toolchain": {"id": (rec.get("toolchain") or {}).get("id"),
                      "packages": (rec.get("toolchain") or {}).get("packages")},
        "sections": [{"type": s["type"], "sha256": s["sha256"], "size": s.get("size")} for s in rec["sections"]],
        "runtime_compatibility": {"releases": rows, **summary(rows)},
        "fixes": (rec.get("details") or {}).get("fixes") or [],
        "build_command": (rec.get("details") or {}).get("build_command"),
        "reproduce": reproduce_paths(rec),
    }


def manifest(model_id: str, card_sha256: str, facts: dict[str, Any]) -> dict[str, Any]:
    return {"schema": MANIFEST_SCHEMA, "generator": f"litertlm-farm {__version__}", "model_id": model_id,
            "card_sha256": card_sha256, "files": [file_record(v) for v in facts["variants"]]}


def manifest_bytes(m: dict[str, Any]) -> bytes:
    return (json.dumps(m, indent=2, sort_keys=True) + "\n").encode()


def inputs_yaml(v: dict[str, Any]) -> dict[str, str]:
    """{repository path: YAML text} of the file's recorded build config and recipe; {} for a file
    built before the farm recorded them."""
    rec = v["lineage"]
    config = (rec.get("details") or {}).get("config")
    body = (rec.get("recipe") or {}).get("body")
    if not config or not body:
        return {}
    paths = reproduce_paths(rec)
    # As a user writes it: export.source_grid is the recipe's to set (a config naming it is refused);
    # the recipe is the file beside it (--recipe).
    config = {k: v for k, v in config.items() if k != "recipe"}
    if isinstance(config.get("export"), dict):
        config["export"] = {k: v for k, v in config["export"].items() if k != "source_grid"}
    return {paths["config"]: yaml.safe_dump(config, sort_keys=False, allow_unicode=True),
            paths["recipe"]: yaml.safe_dump(body, sort_keys=False, allow_unicode=True)}


def reproduce(model_id: str, facts: dict[str, Any]) -> str:
    """REPRODUCE.md: per file, the source pin, the converter versions, the config and recipe
    files, the command, and the sha256 it must give."""
    lines = [f"# Reproducing {model_id}", "",
             "Each file here was built by litertlm-farm from the inputs below, as recorded in its lineage. The "
             "farm's builds are made to be deterministic (the builder's uuid and timestamp come from the inputs; "
             "every toolchain process has one hash seed), so the same source, toolchain lock, config and recipe "
             "should give the same sha256. `farm rebuild SHA`, on the farm that built a file, makes it again in a "
             "clean working area and says MATCH or which sections differ and why; this repository records no "
             "such rebuild of these files.", ""]
    for v in facts["variants"]:
        rec = v["lineage"]
        src = rec.get("source") or {}
        tc = (rec.get("toolchain") or {}).get("packages") or {}
        paths = reproduce_paths(rec)
        if src.get("kind") == "hf":
            pin = f"Hugging Face `{src.get('repo_id')}` at revision `{src.get('revision')}`"
        elif src.get("kind") == "generated":
            spec = src.get("spec") or {}
            pin = f"generated by `farm_toolchain/make_model.py` (family {spec.get('family')}, seed {spec.get('seed')})"
        else:
            pin = f"{src.get('kind')} source `{src.get('repo_id') or src.get('path')}`"
        lines += [f"## `{rec['name']}`", "",
                  f"- Expected: sha256 `{rec['sha256']}`, {rec['size']:,} B.",
                  f"- Source: {pin}; source id `{src.get('id')}` (the sha256 of every source file, in lineage).",
                  f"- Toolchain: litert-torch {tc.get('litert-torch')}, ai-edge-quantizer {tc.get('ai-edge-quantizer')}, "
                  f"litert-lm-builder {tc.get('litert-lm-builder')}, torch {tc.get('torch')} (litertlm-farm's "
                  f"`toolchain/requirements.txt`; the env's freeze digest `{(rec.get('toolchain') or {}).get('id')}`).",
                  f"- Recipe: {(rec.get('recipe') or {}).get('name')} (digest `{(rec.get('recipe') or {}).get('digest')}`).",
                  ""]
        if inputs_yaml(v):
            lines += ["```sh", f"farm build {paths['config']} --recipe {paths['recipe']} --json",
                      f"# its \"artifact\".\"sha256\" must be {rec['sha256']}",
                      "```", ""]
        else:
            lines += ["This file was built before the farm recorded its build config: it cannot be rebuilt from this "
                      "repository alone.", ""]
        lines += [f"On the farm that built it: `farm rebuild {rec['sha256']}`.", ""]
    return "\n".join(lines)
