"""Image-text-to-text bundles (issue 21), at the toolchain's commands: the tiny Gemma 3 VL made
locally, exported with its vision encoder, packaged with its extra sections, and its image turns
gated through litert-lm against PyTorch's processor path. The negative control of the image gates is
litert-torch's own encoder graph (normalize_in_graph: false), which litert-lm feeds [0, 1] pixels;
of the second-turn check, the text build of the same source (no embedder section)."""

from __future__ import annotations

import json

import pytest

from farm.families.tiny import make_model_request
from farm.errors import BadInput
from farm.settings import Settings
from farm.toolchain import Toolchain

pytestmark = pytest.mark.slow

SEED = "c" * 64


@pytest.fixture(scope="module")
def tc(toolchain_python, tmp_path_factory):
    return Toolchain(Settings(home=tmp_path_factory.mktemp("vision-home"), toolchain_python=toolchain_python))


@pytest.fixture(scope="module")
def vl(tc, tmp_path_factory):
    root = tmp_path_factory.mktemp("vision")
    model = root / "model"
    tc.call("make_model", make_model_request("gemma3_vl", seed=0, output_dir=str(model)))
    bundles = {}
    for normalize in (True, False):
        out = root / f"export-{normalize}"
        exp = tc.call("export", {"model_dir": str(model), "output_dir": str(out), "prefill_lengths": [32],
                                 "cache_length": 128, "vision": True, "normalize_in_graph": normalize})
        pkg = tc.call("package", {"model_dir": str(model), "tflite_path": exp["tflite_path"],
                                  "output_path": str(root / f"vl-{normalize}.litertlm"), "prefill_lengths": [32],
                                  "cache_length": 128, "reproducible_seed": SEED, "end_of_turn": "<end_of_turn>",
                                  "parts": exp["parts"], "image": exp["image"]})
        bundles[normalize] = (exp, pkg)
    # The text build of the same source (a decoder that takes token ids, no embedder): the control
    # of the second-turn check.
    exp = tc.call("export", {"model_dir": str(model), "output_dir": str(root / "export-text"),
                             "prefill_lengths": [32], "cache_length": 128})
    bundles["text"] = (exp, tc.call("package", {
        "model_dir": str(model), "tflite_path": exp["tflite_path"], "output_path": str(root / "text.litertlm"),
        "prefill_lengths": [32], "cache_length": 128, "reproducible_seed": SEED, "end_of_turn": "<end_of_turn>"}))
    return model, bundles


def test_the_vl_export_has_its_parts_and_image_contract(vl):
    model, bundles = vl
    exp, pkg = bundles[True]
    assert set(exp["parts"]) == {"embedder", "vision_encoder", "vision_adapter"}
    # 64x64 in 8x8 patches = 64 patches, pooled to 16 soft tokens; the adapter appends <end_of_image>.
    assert exp["image"] == {"height": 64, "width": 64, "mean": [0.5] * 3, "std": [0.5] * 3, "patches": 64,
                            "soft_tokens": 16, "images_per_turn": 1, "positions_per_image": 17,
                            "normalize_in_graph": True}
    # The decoder takes embeddings (the embedder is its own section).
    assert "embeddings" in exp["signatures"]["decode"]["inputs"]
    assert [s["type"] for s in pkg["sections"]].count("TFLiteModel") == 4
    assert pkg["llm_model_type"] == "gemma3n"
    # The tiny model's processor config is what the contract came from.
    assert json.loads((model / "preprocessor_config.json").read_text())["size"] == {"height": 64, "width": 64}


def test_image_turns_follow_pytorch_and_the_uncorrected_graph_fails(tc, vl):
    model, bundles = vl
    results = {}
    for normalize, (_exp, pkg) in ((k, v) for k, v in bundles.items() if k != "text"):
        results[normalize] = tc.call("gate", {"gate": "image_turn_parity", "bundle_path": pkg["output_path"],
                                              "model_dir": str(model), "reference_stop_ids": [2]})
    good, bad = results[True], results[False]
    assert good["status"] == "pass", good["evidence"]
    assert good["metrics"]["exact"] == 3 and good["metrics"]["swap_unfollowed"] == 0
    # PyTorch's first token differs between images (the tiny model's projector is not zero), so the
    # swap check has pairs to check.
    assert good["metrics"]["swap_pairs"] >= 1
    # Negative control: litert-torch's own graph sees [0, 1] pixels from the runtime.
    assert bad["status"] == "fail" and bad["metrics"]["exact"] < 3, bad["evidence"]


def test_an_architecture_without_a_vision_export_is_refused(tc, tmp_path):
    model = tmp_path / "llama"
    tc.call("make_model", make_model_request("llama", seed=0, output_dir=str(model)))
    with pytest.raises(BadInput) as exc:
        tc.call("export", {"model_dir": str(model), "output_dir": str(tmp_path / "o"), "prefill_lengths": [8],
                           "cache_length": 64, "vision": True})
    assert "exports no vision encoder for model_type 'llama'" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_the_encoder_sees_what_the_tower_sees_and_the_uncorrected_graph_does_not(tc, vl):
    model, bundles = vl
    res = {}
    for normalize in (True, False):
        exp, pkg = bundles[normalize]
        res[normalize] = tc.call("gate", {"gate": "vision_encoder_parity", "bundle_path": pkg["output_path"],
                                          "model_dir": str(model),
                                          "float_encoder_path": exp["parts"]["vision_encoder"]})
    good, bad = res[True], res[False]
    assert good["status"] == "pass", good["evidence"]
    assert good["metrics"]["float_min_correlation"] > 0.99999 and good["metrics"]["bundle_max_abs_diff"] < 1e-4
    assert good["metrics"]["patches"] == 3 * 64
    assert bad["status"] == "fail" and bad["metrics"]["bundle_min_correlation"] < 0.9, bad["evidence"]


def test_the_stop_token_defect_shows_on_the_image_bundle_and_not_on_the_text_build(tc, vl):
    """litert-lm 0.18.1 feeds the previous answer's stop token as a zero embedding when the prompt is
    taken as embeddings: the image bundle's second reply is PyTorch's with that embedding zeroed;
    the text build of the same source (token ids) gets PyTorch's."""
    model, bundles = vl
    res = {k: tc.call("gate", {"gate": "second_turn_parity", "bundle_path": bundles[k][1]["output_path"],
                               "model_dir": str(model), "reference_stop_ids": [2]}) for k in (True, "text")}
    image, text = res[True], res["text"]
    assert text["status"] == "pass", text["evidence"]
    assert text["metrics"]["turn1_capped"] is False and text["metrics"]["embedder_section"] is False
    assert image["status"] == "fail", image["evidence"]
    assert image["metrics"]["turn1_same"] and image["metrics"]["zeroed_stop_explains"], image["evidence"]
    assert "zero embedding" in image["findings"][0] and "0.18.1" in image["findings"][0]


def test_text_turns_on_the_image_bundle_equal_the_text_build_and_a_changed_text_build_does_not(tc, vl, tmp_path):
    model, bundles = vl
    image, text = bundles[True][1]["output_path"], bundles["text"][1]["output_path"]
    same = tc.call("gate", {"gate": "text_turn_equality", "bundle_path": image, "text_bundle_path": text})
    assert same["status"] == "pass" and same["metrics"]["same"] == 3, same["evidence"]
    # Negative control: the text build with another chat template (each turn prefixed) answers otherwise.
    template = (model / "chat_template.jinja").read_text().replace("<start_of_turn>user\\n",
                                                                    "<start_of_turn>user\\nBriefly: ")
    assert "Briefly" in template
    exp = bundles["text"][0]
    other = tc.call("package", {"model_dir": str(model), "tflite_path": exp["tflite_path"],
                                "output_path": str(tmp_path / "other.litertlm"), "prefill_lengths": [32],
                                "cache_length": 128, "reproducible_seed": SEED, "end_of_turn": "<end_of_turn>",
                                "craft": {"chat_template": template}})
    differ = tc.call("gate", {"gate": "text_turn_equality", "bundle_path": image,
                              "text_bundle_path": other["output_path"]})
    assert differ["status"] == "fail" and differ["metrics"]["same"] < 3, differ["evidence"]


ZERO_PROJECTOR = """
import sys
from safetensors.torch import load_file, save_file
path = sys.argv[1] + "/model.safetensors"
sd = load_file(path)
key = next(k for k in sd if k.endswith("mm_input_projection_weight"))
sd[key].zero_()
save_file(sd, path, metadata={"format": "pt"})
"""


def test_the_swap_check_fails_a_bundle_whose_answers_ignore_the_image(tc, vl, toolchain_python, tmp_path):
    """Negative control of the swap check: the same decoder, embedder and encoder with the adapter of
    a model whose projector is zero (transformers' own start): every image reaches the decoder as the
    same soft tokens, so the runtime's first token cannot change where PyTorch's does."""
    import shutil
    import subprocess

    model, bundles = vl
    zero = tmp_path / "zero-projector"
    shutil.copytree(model, zero)
    subprocess.run([toolchain_python, "-c", ZERO_PROJECTOR, str(zero)], check=True, capture_output=True)
    zexp = tc.call("export", {"model_dir": str(zero), "output_dir": str(tmp_path / "zero-export"),
                              "prefill_lengths": [32], "cache_length": 128, "vision": True})
    exp = bundles[True][0]
    blind = tc.call("package", {"model_dir": str(model), "tflite_path": exp["tflite_path"],
                                "output_path": str(tmp_path / "blind.litertlm"), "prefill_lengths": [32],
                                "cache_length": 128, "reproducible_seed": SEED, "end_of_turn": "<end_of_turn>",
                                "parts": {**exp["parts"], "vision_adapter": zexp["parts"]["vision_adapter"]},
                                "image": exp["image"]})
    res = tc.call("gate", {"gate": "image_turn_parity", "bundle_path": blind["output_path"],
                           "model_dir": str(model), "reference_stop_ids": [2]})
    assert res["status"] == "fail" and res["metrics"]["swap_unfollowed"] >= 1, res["evidence"]
    assert any("does not follow the image" in f for f in res["findings"])


def test_grounding_probes_need_a_model_that_answers_them(tc, vl):
    """The seeds' opposite probes are for trained models: on the random tiny model PyTorch itself
    misses them, and the gate says the probe does not measure the bundle; a probe any reply meets
    passes (the plumbing: image attached, reply read, PyTorch asked the same)."""
    model, bundles = vl
    image = bundles[True][1]["output_path"]
    base = {"gate": "grounding_probes", "bundle_path": image, "model_dir": str(model), "reference_stop_ids": [2]}
    seeds = tc.call("gate", base)
    assert seeds["status"] == "fail" and seeds["metrics"]["probes"] == 2, seeds["evidence"]
    assert any("PyTorch misses" in f for f in seeds["findings"])
    anything = tc.call("gate", {**base, "probes": [{"image": "text", "prompt": "Describe it.", "expect": "."}]})
    assert anything["status"] == "pass", anything["evidence"]
