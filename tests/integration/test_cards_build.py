"""Cards from a lineage DB populated by real builds of the tiny model: two recipes, then a
tokenizer-only change, then a recipe change (same variant name, another body). Rows cite the right
sha256; a row measured on the previous file is carried over only when its sections are
byte-identical and is stale otherwise; Changes names the replaced section; the build publishes the
card (store, lineage kind `card`, Prefect artifact card-<model id>)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from farmtest import REPO, farm_env, run_farm
from farmtest.hub_replay import HubReplay

pytestmark = pytest.mark.slow
MODEL = "tiny-qwen35"


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _check(env) -> dict:
    proc = run_farm(["card", MODEL, "--check", "--json"], env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _variant_rows(out: dict, name_part: str) -> tuple[dict, list[str]]:
    """(the artifact row, the Correctness lines) of the variant whose file name contains name_part."""
    art = next(a for a in out["card"]["artifacts"] if name_part in a["file"])
    section = out["markdown"].split("## Correctness", 1)[1].split("\n## ", 1)[0]
    return art, [line for line in section.splitlines() if f"`{art['file']}`" in line]


@pytest.fixture(scope="module")
def farm(tmp_path_factory, prefect_server, toolchain_python):
    home = tmp_path_factory.mktemp("cards-home")
    return home, farm_env(home, prefect_server)


def test_cards_follow_the_bytes_through_four_builds(farm, tmp_path, prefect_server):
    home, env = farm
    # 1. The tiny model, every gate and the local CPU: the build's last stage publishes its card.
    first = _ok(run_farm(["build", "examples/tiny-qwen35.yaml", "--json"], env))
    a1 = first["artifact"]["sha256"]
    assert first["card"]["published"] is True, first["card"]
    out_dir = tmp_path / "card"
    proc = run_farm(["card", MODEL, "--out", str(out_dir), "--json"], env)
    written = _ok(proc)
    assert sorted(p.name for p in out_dir.iterdir()) == ["CARD.md", "card.json", "chart.png"]
    card = json.loads((out_dir / "card.json").read_text())
    assert card["schema_version"] == "1.2" and card["model"]["id"] == MODEL
    assert [a["sha256"] for a in card["artifacts"]] == [a1]
    assert card["conversion"]["command"] == "farm build examples/tiny-qwen35.yaml --recipe qwen35_wi8_float_gates"
    assert any("One Engine per conversation" in p for p in card["pitfalls"])
    (rec,) = card["device"]["records"]
    assert rec["device"] == "local-cpu" and rec["run"]["runs"] is True and rec["source"].endswith(a1)
    md = (out_dir / "CARD.md").read_text()
    # Each row names the CPU class it ran on (this host's own: the tests' registry has no other).
    assert "TODO" not in md and re.search(r"\| `tiny-qwen35_qwen35_wi8_float_gates.litertlm` \| generation_parity \| "
                                          r"[^|(]+ \| pass \| this file", md)
    assert (out_dir / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Recorded in lineage as kind `card`, with the bundle as an input; the same card twice is one object.
    cards = _ok(run_farm(["artifacts", "--kind", "card", "--json"], env))
    assert written["card_sha256"] in {c["sha256"] for c in cards["artifacts"]}
    lin = _ok(run_farm(["lineage", written["card_sha256"], "--json"], env))
    assert lin["kind"] == "card" and lin["details"]["describes"] == [a1]
    # The Prefect UI keeps the card as a markdown artifact keyed card-<model id> (its REST API).
    import httpx

    arts = httpx.post(f"{prefect_server}/artifacts/filter", timeout=30,
                      json={"artifacts": {"key": {"any_": [f"card-{MODEL}"]}}, "sort": "CREATED_DESC"}).json()
    assert arts and arts[0]["type"] == "markdown" and a1 in arts[0]["data"], arts

    # 2. A second recipe: a second variant of the same model, its own chain.
    second = _ok(run_farm(["build", "examples/tiny-qwen35.yaml", "--recipe", "dynamic_wi8_afp32", "--no-gates", "--json"], env))
    b1 = second["artifact"]["sha256"]
    out = _check(env)
    assert sorted(a["sha256"] for a in out["card"]["artifacts"]) == sorted([a1, b1])
    # The repository a user uploads (issue 20): both files verified on the way out, then checked;
    # a swapped byte is refused naming the file.
    repo = tmp_path / "repo"
    pub = _ok(run_farm(["publish", MODEL, "--to", str(repo), "--json"], env))
    written = {f["path"]: f["sha256"] for f in pub["repository"]["files"]}
    assert {written[a["file"]] for a in out["card"]["artifacts"]} == {a1, b1}
    assert {"README.md", "card.json", "litertlm_manifest.json", "REPRODUCE.md"} <= set(written)
    assert yaml.safe_load((repo / "README.md").read_text()[4:].split("\n---\n", 1)[0])["library_name"] == "litert-lm"
    assert run_farm(["publish", MODEL, "--to", str(repo), "--check"], env).returncode == 0
    # The same repository onto the hub (the replay, over the LFS protocol): a dry run changes
    # nothing; the upload is one commit naming both files' sha256 with exactly the folder's bytes;
    # publishing again unchanged makes no commit.
    with HubReplay({}) as hub:
        henv = {**env, "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_replay", "HF_HUB_DISABLE_XET": "1"}
        dry = _ok(run_farm(["publish", MODEL, "--to", "hf://me/tiny-qwen35", "--dry-run", "--json"], henv))["repository"]
        assert dry["commit"] is None and "me/tiny-qwen35" not in hub.repos and set(dry["add"]) == set(written)
        up = _ok(run_farm(["publish", MODEL, "--to", "hf://me/tiny-qwen35", "--json"], henv))["repository"]
        (commit,) = hub.repos["me/tiny-qwen35"].commits
        staged = Path(up["dir"])
        assert sorted(commit["added"]) == sorted(written) and commit["deleted"] == []
        assert all(hub.repos["me/tiny-qwen35"].files[p] == (staged / p).read_bytes() for p in written)
        assert a1[:12] in commit["summary"] and b1[:12] in commit["summary"] and up["commit"] is not None
        assert hub.validated and "library_name: litert-lm" in hub.validated[-1]
        again = _ok(run_farm(["publish", MODEL, "--to", "hf://me/tiny-qwen35", "--json"], henv))["repository"]
        assert again["commit"] is None and len(hub.repos["me/tiny-qwen35"].commits) == 1
    swapped = next(a["file"] for a in out["card"]["artifacts"] if a["sha256"] == b1)
    data = bytearray((repo / swapped).read_bytes())
    data[-1] ^= 1
    (repo / swapped).write_bytes(bytes(data))
    refused = run_farm(["publish", MODEL, "--to", str(repo), "--check"], env)
    assert refused.returncode == 1 and f"differs: {swapped}: sha256" in refused.stderr, refused.stderr[-2000:]

    # 3. A tokenizer-only change: the same model folder with tokenizer.json re-serialized (same
    # tokens, other bytes). The TFLite section is byte-identical; the tokenizer section is not.
    lineage_a1 = _ok(run_farm(["lineage", a1, "--json"], env))
    folder = tmp_path / "tokchange"
    shutil.copytree(lineage_a1["source"]["path"], folder)
    tok = json.loads((folder / "tokenizer.json").read_text())
    (folder / "tokenizer.json").write_text(json.dumps(tok, indent=1, ensure_ascii=False))
    cfg = yaml.safe_load((REPO / "examples/tiny-qwen35.yaml").read_text())
    cfg["source"] = {"kind": "local", "path": str(folder)}
    cfg_path = tmp_path / "tiny-tokchange.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    third = _ok(run_farm(["build", str(cfg_path), "--no-gates", "--json"], env))
    a2 = third["artifact"]["sha256"]
    assert a2 != a1
    out = _check(env)
    art, rows = _variant_rows(out, "float_gates")
    assert art["sha256"] == a2
    by_gate = {line.split("|")[2].strip(): line for line in rows}
    # logits parity depends on the TFLite section only: carried over, citing a1.
    assert f"`{a1[:12]}`, whose TFLite section this file carries byte for byte" in by_gate["logits_parity"]
    assert "| pass |" in by_gate["logits_parity"]
    # generation parity depends on the tokenizer too: stale, naming what changed.
    assert "| stale |" in by_gate["generation_parity"] and "STALE (tokenizer section changed)" in by_gate["generation_parity"]
    assert "| stale |" in by_gate["tokenizer_parity"]
    changes = out["markdown"].split("## Changes", 1)[1].split("\n## ", 1)[0]
    assert f"`{a1[:12]}`" in changes and f"`{a2[:12]}`" in changes
    assert "tokenizer section replaced" in changes and "TFLite section byte-identical" in changes
    assert f"Inputs changed: source " in changes and "; tokenizer `" in changes
    # The device run on a1 still stands for a2 (same TFLite section), citing a1.
    recs = [r for r in out["card"]["device"]["records"] if r["source"].endswith(a1)]
    assert len(recs) == 1 and recs[0]["run"]["runs"] is True
    # A local folder is a real model to lineage: without an arithmetic result on these sections the
    # card is refused, naming the file.
    assert any(f.startswith("real_models_have_an_arithmetic_result") and a2[:12] in f for f in out["failures"])
    refused = run_farm(["card", MODEL, "--out", str(tmp_path / "refused")], env)
    assert refused.returncode == 1 and "not published" in refused.stderr and not (tmp_path / "refused").exists()

    # 4. A recipe change under the same variant name (only in_proj_a kept float): the TFLite
    # section changes, so the device row is stale and no device is listed as verified.
    recipe = yaml.safe_load((REPO / "recipes/qwen35_wi8_float_gates.yaml").read_text())
    recipe["float_exceptions"][0].update(regex="Linear_in_proj_a(?![A-Za-z0-9_])", layers=["in_proj_a"])
    recipe_path = tmp_path / "qwen35_wi8_float_gates.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe))
    fourth = _ok(run_farm(["build", str(cfg_path), "--recipe", str(recipe_path), "--no-gates", "--json"], env))
    a3 = fourth["artifact"]["sha256"]
    out = _check(env)
    art, rows = _variant_rows(out, "float_gates")
    assert art["sha256"] == a3
    assert not any(r["source"].endswith((a1, a2)) for r in (out["card"].get("device") or {}).get("records", []))
    changes = out["markdown"].split("## Changes", 1)[1].split("\n## ", 1)[0]
    assert "TFLite section replaced" in changes and f"`{a2[:12]}`" in changes
    by_gate = {line.split("|")[2].strip(): line for line in rows}
    assert "| stale |" in by_gate["logits_parity"] and "TFLite section" in by_gate["logits_parity"]
