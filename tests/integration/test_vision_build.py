"""The image build end to end (issue 21): tiny-gemma3_vl through every stage, gate and the card in
one farm home, beside the text build of the same source (the card's section comparison), and an
image build of a family without a vision export refused before any work."""

from __future__ import annotations

import json

import pytest
import yaml

from farmtest import REPO, farm_env, run_farm

pytestmark = pytest.mark.slow

CONFIG = REPO / "examples" / "families" / "tiny-gemma3_vl.yaml"


@pytest.fixture(scope="module")
def home(tmp_path_factory, prefect_server, toolchain_python):
    root = tmp_path_factory.mktemp("vision-build")
    env = farm_env(root / "home", prefect_server)
    text = root / "text.yaml"
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg.pop("vision")
    cfg.pop("card", None)
    cfg["name"] = "tiny-gemma3_vl-text"
    text.write_text(yaml.safe_dump(cfg))
    int8 = root / "int8-encoder.yaml"
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["name"], cfg["vision"] = "tiny-gemma3_vl-int8-encoder", {"recipe": "dynamic_wi8_afp32"}
    int8.write_text(yaml.safe_dump(cfg))
    built = {}
    for name, path in (("text", text), ("image", CONFIG), ("int8_encoder", int8)):
        proc = run_farm(["build", str(path), "--recipe", "float32", "--no-bench", "--json"], env)
        built[name] = (proc, json.loads(proc.stdout) if proc.stdout.strip() else {})
    return root, env, built


def test_the_image_build_runs_every_stage_and_gate(home):
    _root, env, built = home
    proc, summary = built["image"]
    gates = {g["gate"]: g["status"] for g in summary["gates"]}
    # The one failure is the runtime's stop-token defect (a family known failure on litert-lm 0.18.1).
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert gates.pop("second_turn_parity") == "fail"
    # A known failure of the runtime re-checks no sibling (it is not the recipe's).
    assert not summary["rechecks"], summary["rechecks"]
    assert set(gates.values()) == {"pass"}, gates
    assert {"vision_encoder_parity", "image_turn_parity", "text_turn_equality", "logits_parity",
            "logits_parity_float"} <= set(gates)
    # The text build of the same source: no image gates, every gate passes.
    tproc, tsummary = built["text"]
    assert tproc.returncode == 0, tproc.stderr[-2000:]
    assert not {"vision_encoder_parity", "image_turn_parity", "second_turn_parity"} & {g["gate"] for g in tsummary["gates"]}

    lin = json.loads(run_farm(["lineage", summary["artifact"]["sha256"], "--json"], env).stdout)
    assert lin["details"]["image"]["positions_per_image"] == 17 and lin["details"]["vision_recipe"] == "float32"
    tflites = [s for s in lin["sections"] if s["type"] == "TFLiteModel"]
    assert len(tflites) == 4
    # Each extra section is a recorded part of this build (its sha256 in lineage, with its role).
    assert [s["equals_artifact"]["kind"] for s in tflites] == ["quantized_tflite"] + ["tflite_part"] * 3


def test_the_card_states_the_contract_the_pitfall_and_the_shared_sections(home):
    root, env, _built = home
    out = root / "card"
    proc = run_farm(["card", "tiny-gemma3_vl", "--out", str(out)], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (out / "CARD.md").read_text()
    section = md.split("## Image input", 1)[1].split("\n## ", 1)[0]
    assert "resized (stretched) to 64x64" in section and "17 prompt positions per image" in section
    assert "zero embedding" in section and "litert-lm 0.18.1" in section
    assert "byte-identical ExecutorMetadataProto, HF_Tokenizer_Zlib" in section
    assert "Text turns (pass): 3 of 3 replies equal the text build's" in section
    card = json.loads((out / "card.json").read_text())
    assert card["model"]["task"] == "image-text-to-text"
    assert any("zero embedding" in p for p in card["pitfalls"])
    assert "only here: TFLiteModel (embedder), TFLiteModel (vision encoder), TFLiteModel (vision adapter)" in section


def test_an_image_build_of_a_family_without_a_vision_export_is_refused(home, tmp_path):
    _root, env, _built = home
    cfg = tmp_path / "gemma3-vision.yaml"
    cfg.write_text(yaml.safe_dump({"name": "tiny-gemma3-vision", "source": {"kind": "generated", "family": "gemma3"},
                                   "recipe": "float32", "vision": {"recipe": "float32"}}))
    proc = run_farm(["build", str(cfg), "--no-bench"], env)
    assert proc.returncode == 2
    assert "family 'gemma3' has no vision encoder that litert-torch exports (families with one: gemma3_vl)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_vision_recipe_makes_its_own_file_over_the_same_decoder(home):
    """The float decoder is one artifact for both vision recipes; the int8 encoder's build must still
    get its own parts (a regression: they once rode on the shared decoder's record, so the second
    build packaged the first one's float encoder)."""
    _root, env, built = home
    float_sha, int8_sha = (built[k][1]["artifact"]["sha256"] for k in ("image", "int8_encoder"))
    assert float_sha != int8_sha
    rows = {k: json.loads(run_farm(["lineage", sha, "--json"], env).stdout)
            for k, sha in (("float", float_sha), ("int8", int8_sha))}
    tfl = {k: [s["sha256"] for s in r["sections"] if s["type"] == "TFLiteModel"] for k, r in rows.items()}
    assert tfl["float"][0] == tfl["int8"][0]  # the decoder
    assert tfl["float"][2] != tfl["int8"][2]  # the vision encoder
    assert rows["int8"]["details"]["vision_recipe"] == "dynamic_wi8_afp32"
    enc = next(g for g in rows["int8"]["gates"] if g["gate"] == "vision_encoder_parity")
    assert 0.99 < enc["metrics"]["bundle_min_correlation"] < enc["metrics"]["float_min_correlation"]
