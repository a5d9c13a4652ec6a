"""Refusals before any work (farm/refusals/): each on a crafted source folder or a hub answer
(no network: the metadata is the folder's config.json, or a model_info answer in tests/data/hub),
next to the source that passes; through the CLI, exit 2, one line, `--json` gives
{"refused": {...}}, nothing stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from farm.families import family_architectures
from farm.refusals import REFUSALS, Refused, SourceFacts, check_source, folder_facts, hub_facts
from farm.refusals.base import EXPORT_FLOOR_BYTES, PEAK_BYTES_PER_PARAM, ExportMemory
from farmtest import REPO, DATA

HUB = DATA / "hub"
GOOD_CONFIG = {"architectures": ["LlamaForCausalLM"], "torch_dtype": "float32", "eos_token_id": 2}


def _folder(tmp_path: Path, config: dict | None = None, files: dict[str, bytes] | None = None) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(GOOD_CONFIG if config is None else config))
    (d / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}, "added_tokens": []}))
    for name, data in ({"model.safetensors": b"\0" * 4096} if files is None else files).items():
        (d / name).write_bytes(data)
    return d


def _facts(folder: Path, **over) -> SourceFacts:
    f = folder_facts(folder, family_architectures(), json.loads((folder / "config.json").read_text()))
    for k, v in over.items():
        setattr(f, k, v)
    return f


def _refused(facts: SourceFacts) -> Refused:
    with pytest.raises(Refused) as info:
        check_source(facts)
    return info.value


def test_a_plain_full_weight_folder_passes(tmp_path):
    check_source(_facts(_folder(tmp_path), available_memory=2**40))


def test_remote_code_is_refused_and_never_run(tmp_path):
    cfg = {**GOOD_CONFIG, "auto_map": {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}}
    r = _refused(_facts(_folder(tmp_path, cfg, {"model.safetensors": b"\0" * 64, "modeling_x.py": b"raise SystemExit"})))
    assert r.reason == "remote_code" and "modeling_x.XForCausalLM" in r.detail and "never executes" in r.detail


@pytest.mark.parametrize("method", ["gptq", "awq", "bitsandbytes"])
def test_pre_quantized_weights_are_refused(tmp_path, method):
    r = _refused(_facts(_folder(tmp_path, {**GOOD_CONFIG, "quantization_config": {"quant_method": method}})))
    assert r.reason == "pre_quantized" and repr(method) in r.detail and "full-precision" in r.action


def test_no_full_weights_is_refused(tmp_path):
    r = _refused(_facts(_folder(tmp_path, files={"pytorch_model.bin": b"\0" * 64})))
    assert r.reason == "no_full_weights" and "pytorch_model.bin" in r.detail


def test_an_index_naming_missing_shards_is_refused(tmp_path):
    d = _folder(tmp_path, files={"model-00001-of-00002.safetensors": b"\0" * 64})
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    r = _refused(_facts(d))
    assert r.reason == "no_full_weights" and "model-00002-of-00002.safetensors" in r.detail


def test_an_architecture_no_family_covers_is_refused_listing_the_families(tmp_path):
    r = _refused(_facts(_folder(tmp_path, {**GOOD_CONFIG, "architectures": ["MambaForCausalLM"]})))
    assert r.reason == "no_family"
    for name in ("gemma3", "llama", "qwen3_5"):
        assert name in r.detail
    assert "Gemma3ForCausalLM" in r.detail


def test_too_large_for_this_machine_by_the_recorded_peak_is_refused(tmp_path):
    folder = _folder(tmp_path, files={"model.safetensors": b"\0" * 4_000_000})  # ~1M float32 params
    measured = ExportMemory("once", {"small": (25.0, "measured on the export abc of 135M parameters")})
    floor = EXPORT_FLOOR_BYTES
    check_source(_facts(folder, available_memory=floor + 26_000_000, memory=measured))  # the floor + 25 MB fits
    r = _refused(_facts(folder, available_memory=floor + 24_000_000, memory=measured))
    assert r.reason == "too_large" and "measured on the export abc" in r.detail and "GiB" in r.action
    assert f"{(floor + 25_000_000) / 2**30:.1f} GiB" in r.detail  # the predicted peak, floor included


def test_too_large_names_lightweight_conversion_when_that_would_fit_and_only_then(tmp_path):
    folder = _folder(tmp_path, files={"model.safetensors": b"\0" * 4_000_000})  # ~1M float32 params
    lighter = ExportMemory("once+lightweight", {"small": (10.0, "measured on the export def")})
    memory = ExportMemory("once", {"small": (25.0, "measured on the export abc")}, lighter=lighter)
    r = _refused(_facts(folder, available_memory=EXPORT_FLOOR_BYTES + 15_000_000, memory=memory))
    assert "experimental_lightweight_conversion: true" in r.action and "measured on the export def" in r.action
    # negative control: lightweight would not fit either, so it is not offered
    r = _refused(_facts(folder, available_memory=EXPORT_FLOOR_BYTES + 5_000_000, memory=memory))
    assert "lightweight" not in r.action and "host with at least" in r.action


@pytest.mark.parametrize("params, regime", [(10**9, "large"), (300_000_000, "small")])
def test_too_large_without_a_recorded_export_predicts_from_the_farms_figure_for_its_regime(tmp_path, params, regime):
    """A float32 export of 2 GiB or more is written another way and peaks on another line."""
    folder = _folder(tmp_path)
    f = _facts(folder, available_memory=2 * 2**30)
    f.files = {**f.files, "model.safetensors": 4 * params}  # sizes only: the rule reads sizes, not bytes
    r = _refused(f)
    expected = (EXPORT_FLOOR_BYTES + PEAK_BYTES_PER_PARAM[("once", regime)] * params) / 2**30
    assert f"{expected:.1f} GiB" in r.detail and "the farm's figure" in r.detail
    assert ("2 GiB or more" in r.detail) == (regime == "large")


def test_gated_hub_repository_without_a_token_is_refused(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    answer, config = (json.loads((HUB / n).read_text()) for n in ("gated-model-info.json", "gated-config.json"))
    facts = hub_facts(answer, config, family_architectures())
    facts.available_memory = 2**40
    r = _refused(facts)
    assert r.reason == "gated" and "google/gemma-3-270m" in r.detail and "HF_TOKEN" in r.action
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    facts = hub_facts(answer, config, family_architectures())
    facts.available_memory = 2**40
    check_source(facts)  # the same repository with a token: no refusal


@pytest.mark.parametrize("name,reason", [("remote-code", "remote_code"), ("gptq", "pre_quantized")])
def test_hub_answers_are_refused_before_a_download(name, reason):
    answer, config = (json.loads((HUB / f"{name}-{k}.json").read_text()) for k in ("model-info", "config"))
    assert _refused(hub_facts(answer, config, family_architectures())).reason == reason


def test_every_refusal_has_a_negative_control_here():
    """A refusal that no test makes fire is a check that cannot fail."""
    text = Path(__file__).read_text()
    for reason in REFUSALS.names():
        assert f'"{reason}"' in text, f"no test makes the {reason} refusal fire"


def test_cli_refusal_is_one_line_exit_2_json_and_nothing_stored(tmp_path):
    folder = _folder(tmp_path, {**GOOD_CONFIG, "quantization_config": {"quant_method": "gptq"}})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: refused-model\nfamily: llama\nsource: {{kind: local, path: {folder}}}\n"
                   "export: {prefill_lengths: [8], cache_length: 64}\n")
    home = tmp_path / "home"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("FARM_", "PREFECT_"))}
    env.update(FARM_HOME=str(home), FARM_PREFECT_SERVER="temporary")
    proc = subprocess.run([sys.executable, "-m", "farm_cli", "build", str(cfg), "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"refused"} and set(out["refused"]) == {"reason", "detail", "action"}
    assert out["refused"]["reason"] == "pre_quantized" and "'gptq'" in out["refused"]["detail"]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: refused (pre_quantized): ") and "Traceback" not in proc.stderr
    assert not (home / "store").exists() or not any(p.is_file() for p in (home / "store").rglob("*"))


def test_a_refusal_survives_prefects_result_serialization():
    """A GGUF or hub source is refused inside the flow; run_flow re-raises the failed state's
    exception, which Prefect pickled: reason, detail and action must come back, as --json prints."""
    import pickle

    r = pickle.loads(pickle.dumps(Refused("gated", "hub repository x is gated", "set HF_TOKEN")))
    assert isinstance(r, Refused) and r.as_json() == {"refused": {"reason": "gated", "detail": "hub repository x is gated",
                                                                  "action": "set HF_TOKEN"}}
    assert str(r) == "refused (gated): hub repository x is gated: set HF_TOKEN"


def test_recorded_peak_predicts_from_the_same_way_made_export_above_the_floor(tmp_path):
    """farm/refusals/base.py recorded_peak: the farm's figures until an export of a 10M+ model made
    the same way is recorded, then, for that export's regime, its peak above the toolchain's floor
    per parameter; the lightweight prediction rides along only for a config that does not ask for
    lightweight conversion."""
    from farm.lineage.db import Database
    from farm.lineage.record import record_artifact
    from farm.resources import Resources
    from farm.settings import Settings
    from farm.refusals import recorded_peak

    res = Resources(Settings(home=tmp_path / "home", cache=tmp_path / "cache"))
    res.__dict__["db"] = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    memory = recorded_peak(res, {})
    assert memory.per_param(1_000_000)[0] == PEAK_BYTES_PER_PARAM[("once", "small")]
    assert memory.lighter is not None and memory.lighter.mode == "once+lightweight"
    with res.db.session() as s:
        record_artifact(s, sha256="ab" * 32, kind="float_tflite", size=80_000_000, uri="file:///a",
                        details={"peak_rss_bytes": EXPORT_FLOOR_BYTES + 100 * 20_000_000,
                                 "source_params": 20_000_000, "memory_mode": "once+lightweight"})
    light = recorded_peak(res, {"experimental_lightweight_conversion": True})
    assert light.mode == "once+lightweight" and light.lighter is None
    per, basis = light.per_param(1_000_000)
    assert per == pytest.approx(100.0) and "abababababab" in basis
    assert light.peak(1_000_000) == EXPORT_FLOOR_BYTES + 100_000_000
    # another regime: the recorded small export says nothing about a 2 GiB+ export
    assert light.per_param(10**9)[0] == PEAK_BYTES_PER_PARAM[("once+lightweight", "large")]
    assert recorded_peak(res, {}).lighter.per_param(1_000_000)[0] == pytest.approx(100.0)
    assert recorded_peak(res, {}).per_param(1_000_000)[0] == PEAK_BYTES_PER_PARAM[("once", "small")]
