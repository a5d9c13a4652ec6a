"""The pure helpers of farm_toolchain/gates/common.py (response shape, request parsing, shipped data):
standard library + pydantic only, so the orchestrator's pytest runs them. Each parser that refuses
input is tested on a value it accepts next to the values it refuses."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from farm_common.gates.prompt_lengths import PromptLengths
from farm_common.gates.questions import Questions
from farm_common.gates.registry import parse
from farm_toolchain.gates import common
from farm_toolchain.protocol import BadInput

# --- result ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", common.STATUSES)
def test_result_takes_every_status(status):
    r = common.result(status, {}, [])
    assert r["status"] == status and r["backend"] == "cpu"
    assert r["runtime"]["package"] == "litert-lm-api" and isinstance(r["runtime"]["version"], str)


@pytest.mark.parametrize("status", ["passed", "could_not_run", "PASS", "", None])
def test_result_refuses_another_status(status):
    with pytest.raises(ValueError, match="gate status must be one of"):
        common.result(status, {}, [])


def test_result_cleans_metrics_and_stringifies_evidence():
    r = common.result("fail", {"nan": float("nan"), "inf": math.inf, "ninf": -math.inf, "x": 0.5, "n": 3,
                               "flag": True, "none": None}, ["a", 2, Path("p")], findings=("f1",), cases=[1])
    assert r["metrics"] == {"nan": None, "inf": None, "ninf": None, "x": 0.5, "n": 3, "flag": True, "none": None}
    assert type(r["metrics"]["flag"]) is bool and type(r["metrics"]["n"]) is int
    assert r["evidence"] == ["a", "2", "p"] and r["findings"] == ["f1"] and r["cases"] == [1]
    assert common.result("pass", {}, [])["findings"] == []


def test_result_takes_numpy_like_numbers():
    class Scalar:
        def __float__(self):
            return 0.25

    assert common.result("pass", {"v": Scalar()}, [])["metrics"]["v"] == 0.25


# --- settings --------------------------------------------------------------------------------------


def test_settings_reads_the_gate_model_from_the_request():
    p = common.settings({"bundle_path": "/b", "max_cases": 5}, PromptLengths)
    assert isinstance(p, PromptLengths) and p.max_cases == 5 and p.tie_margin == 0.01


def test_settings_turns_a_bad_setting_into_bad_input_naming_it():
    with pytest.raises(BadInput, match=r"^max_cases: Input should be greater than or equal to 1$"):
        common.settings({"max_cases": 0}, PromptLengths)
    with pytest.raises(BadInput, match=r"^tie_margin: "):
        common.settings({"tie_margin": "wide"}, PromptLengths)


# --- request fields --------------------------------------------------------------------------------


def test_stop_ids_arg_sorts_and_deduplicates():
    assert common.stop_ids_arg({"reference_stop_ids": [7, 2, 7, 0]}) == [0, 2, 7]
    assert common.stop_ids_arg({"eos": [3]}, "eos") == [3]


@pytest.mark.parametrize("value", [None, [], "2", [2, "3"], [True], [-1], [1.0], {"a": 1}])
def test_stop_ids_arg_refuses_anything_but_a_non_empty_list_of_ids(value):
    request = {} if value is None else {"reference_stop_ids": value}
    with pytest.raises(BadInput, match="^reference_stop_ids must be a non-empty list of token ids"):
        common.stop_ids_arg(request)


def test_int_arg():
    assert common.int_arg({}, "n", 8) == 8
    assert common.int_arg({"n": 3}, "n", 8) == 3
    assert common.int_arg({}, "n", None) is None
    assert common.int_arg({"n": None}, "n", None) is None
    assert common.int_arg({"n": 0}, "n", 8, minimum=0) == 0


@pytest.mark.parametrize("value", [0, -2, True, False, "3", 3.0, None])
def test_int_arg_refuses(value):
    # None is refused where there is a default: an explicit null is not "use the default".
    with pytest.raises(BadInput, match=rf"^n must be an integer >= 1, got {re.escape(repr(value))}$"):
        common.int_arg({"n": value}, "n", 8)


def test_number_arg():
    assert common.number_arg({}, "x", 0.5) == 0.5
    assert common.number_arg({"x": 2}, "x", 0.5) == 2.0 and isinstance(common.number_arg({"x": 2}, "x", 0.5), float)
    assert common.number_arg({"x": None}, "x", 0.5) is None  # null: the check is off
    assert common.number_arg({"x": 1.0}, "x", 0.5, 0.0, 1.0) == 1.0
    assert common.fraction_arg({"f": 0.0}, "f", 1.0) == 0.0


@pytest.mark.parametrize("value, bound", [(True, ">= 0"), ("0.5", ">= 0"), (-0.1, ">= 0"), ([1], ">= 0")])
def test_number_arg_refuses(value, bound):
    with pytest.raises(BadInput, match=rf"^x must be a number {bound}, got "):
        common.number_arg({"x": value}, "x", 0.5)


def test_number_arg_refuses_above_the_maximum():
    with pytest.raises(BadInput, match=r"^x must be a number in \[0, 1\], got 1.5$"):
        common.number_arg({"x": 1.5}, "x", 0.5, 0.0, 1.0)
    with pytest.raises(BadInput, match=r"^f must be a number in \[0, 1\]"):
        common.fraction_arg({"f": 2}, "f", 1.0)


def test_bool_arg():
    assert common.bool_arg({}, "b", False) is False
    assert common.bool_arg({"b": True}, "b", False) is True
    for value in ("true", 1, 0, None):
        with pytest.raises(BadInput, match=rf"^b must be true or false, got {re.escape(repr(value))}$"):
            common.bool_arg({"b": value}, "b", False)


def test_str_list():
    assert common.str_list({"s": ["a", "b"]}, "s") == ["a", "b"]
    assert common.str_list({}, "s", ["d"]) == ["d"]
    for value in ([], ["a", ""], ["a", 1], "a", None):
        with pytest.raises(BadInput, match="^s must be a list of at least 1 non-empty strings$"):
            common.str_list({"s": value}, "s")
    with pytest.raises(BadInput, match="at least 2"):
        common.str_list({"s": ["a"]}, "s", minimum=2)


# --- named sets, compiled questions ----------------------------------------------------------------

SETS = {"sanity": [{"prompt": "2+3?", "expect": "5"}], "other": [{"prompt": "a", "expect": "b"}]}


def test_with_named_set_replaces_a_set_name_with_its_items():
    request = {"questions": "sanity", "bundle_path": "/b"}
    got = common.with_named_set(request, "questions", SETS)
    assert got == {"questions": SETS["sanity"], "bundle_path": "/b"}
    assert request["questions"] == "sanity"  # the caller's request is not changed


def test_with_named_set_leaves_a_list_or_absent_key_as_it_is():
    request = {"questions": [{"prompt": "x", "expect": "y"}]}
    assert common.with_named_set(request, "questions", SETS) is request
    assert common.with_named_set({}, "questions", SETS) == {}


def test_with_named_set_refuses_an_unknown_set_name():
    expected = r"^questions 'sanityy' is not a known set: use one of \['other', 'sanity'\] or a list$"
    with pytest.raises(BadInput, match=expected):
        common.with_named_set({"questions": "sanityy"}, "questions", SETS)


def test_compiled_questions_match_case_insensitively():
    request = {"questions": [{"prompt": "Capital?", "expect": r"\bparis\b"}]}
    qs = parse(Questions, request).questions
    (c,) = common.compiled(qs)
    assert (c["prompt"], c["expect"]) == ("Capital?", r"\bparis\b")
    assert c["pattern"].search("It is PARIS.") and not c["pattern"].search("Comparison")


# --- files -----------------------------------------------------------------------------------------


def test_require_file(tmp_path: Path):
    f = tmp_path / "bundle.litertlm"
    f.write_bytes(b"x")
    assert common.require_file({"bundle_path": str(f)}, "bundle_path") == f
    with pytest.raises(BadInput, match="^bundle_path is required: the .litertlm to run$"):
        common.require_file({}, "bundle_path", "the .litertlm to run")
    for value in ("", 5, None):
        with pytest.raises(BadInput, match="^bundle_path is required"):
            common.require_file({"bundle_path": value}, "bundle_path")
    with pytest.raises(BadInput, match=r"does not exist or is not a file$"):
        common.require_file({"bundle_path": str(tmp_path / "missing")}, "bundle_path")
    with pytest.raises(BadInput, match=r"does not exist or is not a file$"):
        common.require_file({"bundle_path": str(tmp_path)}, "bundle_path")  # a folder


def test_require_file_expands_the_home_folder(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "t.json").write_text("{}")
    assert common.require_file({"tok": "~/t.json"}, "tok") == tmp_path / "t.json"


def test_optional_file(tmp_path: Path):
    f = tmp_path / "f"
    f.write_text("x")
    assert common.optional_file({}, "k") is None and common.optional_file({"k": None}, "k") is None
    assert common.optional_file({"k": str(f)}, "k") == f
    with pytest.raises(BadInput, match="does not exist"):
        common.optional_file({"k": str(tmp_path / "nope")}, "k")


def test_model_folder(tmp_path: Path):
    (tmp_path / "config.json").write_text("{}")
    assert common.model_folder({"model_dir": str(tmp_path)}) == tmp_path
    assert common.model_folder({}, required=False) is None
    with pytest.raises(BadInput, match="^model_dir is required: the Hugging Face model folder"):
        common.model_folder({})
    with pytest.raises(BadInput, match="^ref is required"):
        common.model_folder({"ref": ""}, "ref")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BadInput, match=r"is not a Hugging Face model folder \(no config.json\)$"):
        common.model_folder({"model_dir": str(empty)})
    with pytest.raises(BadInput, match="is not a Hugging Face model folder"):
        common.model_folder({"model_dir": str(tmp_path / "missing")}, required=False)  # given: checked


# --- shipped data ----------------------------------------------------------------------------------


def test_load_strings_shipped_set():
    strings = common.load_strings()
    assert len(strings) == 182
    assert all(set(s) == {"id", "script", "text"} and isinstance(s["text"], str) for s in strings)
    assert len({s["id"] for s in strings}) == 182


def test_load_strings_custom():
    got = common.load_strings(["héllo", {"text": "नमस्ते", "id": "hi", "script": "Deva"}, {"text": "x"}])
    assert got == [
        {"id": "custom-001", "script": "custom", "text": "héllo"},
        {"id": "hi", "script": "Deva", "text": "नमस्ते"},
        {"id": "custom-003", "script": "custom", "text": "x"},
    ]


@pytest.mark.parametrize("raw, message", [
    ([], "strings must be a non-empty list"),
    ("one string", "strings must be a non-empty list"),
    (["ok", 5], r"strings\[1\] must be a string or an object with a string 'text'"),
    ([{"id": "no text"}], r"strings\[0\] must be"),
    ([{"text": 3}], r"strings\[0\] must be"),
])
def test_load_strings_refuses(raw, message):
    with pytest.raises(BadInput, match=message):
        common.load_strings(raw)


# --- small text helpers ----------------------------------------------------------------------------


def test_message_text_joins_the_text_parts():
    assert common.message_text({"content": "hi"}) == "hi"
    parts = [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]
    assert common.message_text({"content": parts}) == "ab"
    assert common.message_text({"content": common.text_parts("x")}) == "x"


def test_first_native_error_prefers_the_one_that_says_why():
    assert common.first_native_error([]) is None
    assert common.first_native_error(["note", "Input token ids are too long"]) == "Input token ids are too long"
    assert common.first_native_error(["note", "other"]) == "note"


def test_short_keeps_both_ends():
    assert common.short("abc", 10) == "abc"
    s = common.short("a" * 50 + "b" * 50, 20)
    assert s == "a" * 10 + " … " + "b" * 10


def test_end_texts_without_stop_ids_needs_no_tokenizer():
    assert common.end_texts({}) == []
    with pytest.raises(BadInput, match="reference_stop_ids"):
        common.end_texts({"reference_stop_ids": []})


def test_sha256_file(tmp_path: Path):
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    assert common.sha256_file(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_engines_of_one_bundle_share_a_private_folder_and_other_bytes_get_their_own(tmp_path, monkeypatch):
    """engine_path: the XNNPACK weight cache an Engine writes beside its link is read by the next Engine
    of the same bytes in this process; other bytes (another file, or the same path rewritten) never
    read it, and at most _KEEP folders are kept."""
    from farm_toolchain.gates import common

    monkeypatch.setattr(common, "_ENGINE_FOLDERS", common.collections.OrderedDict())
    a, b, c = (tmp_path / n for n in ("a", "b", "c"))
    for f in (a, b, c):
        f.write_bytes(f.name.encode() * 100)
    with common.engine_path(a) as first:
        (first.parent / "weights.xnnpack_cache").write_bytes(b"packed")
    with common.engine_path(a) as again:
        assert again == first and (again.parent / "weights.xnnpack_cache").exists()
        assert again.read_bytes() == a.read_bytes() and again.name.endswith(".litertlm")
    with common.engine_path(b) as other:
        assert other.parent != first.parent  # the control: other bytes, another folder
    a.write_bytes(b"rewritten" * 30)  # same path, new bytes: not the old cache
    with common.engine_path(a) as rewritten:
        assert rewritten.parent != first.parent and rewritten.read_bytes() == a.read_bytes()
    with common.engine_path(c):
        pass
    assert len(common._ENGINE_FOLDERS) == common._KEEP and not first.parent.exists()
    common._drop_engine_folders()
    assert not rewritten.parent.exists()


_SERVE_ONE_ENGINE = """
import os, sys, types
from farm_toolchain import protocol
from farm_toolchain.gates import common

def handle(request):
    with common.engine_path(request["bundle"]) as path:
        return {"folder": str(path.parent)}

command = types.SimpleNamespace(handle=handle, env={}, defaults={})
if sys.argv[1] == "killed":  # ends as kill -9 would: no exit hook runs
    handle({"bundle": sys.argv[2]})
    os._exit(0)
protocol.serve(lambda name: command)
"""


def test_a_toolchain_process_removes_its_engine_folders_and_the_next_sweeps_a_killed_ones(tmp_path):
    """The toolchain leaves by os._exit (no atexit hook runs): its engine folders go through
    protocol.at_exit when it ends its requests. A process that died without its hooks (the control:
    it leaves its folder) has that folder removed by the next process's sweep; a live process's is kept."""
    import json
    import subprocess
    import sys

    bundle = tmp_path / "bundle"
    bundle.write_bytes(b"x" * 1000)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    served = subprocess.run([sys.executable, "-c", _SERVE_ONE_ENGINE, "serve"], env=env, text=True,
                            input=json.dumps({"command": "gate", "request": {"bundle": str(bundle)}}) + "\n",
                            capture_output=True, timeout=60)
    folder = Path(json.loads(served.stdout)["folder"])
    assert served.returncode == 0 and folder.parent == tmp and not folder.exists(), served.stderr
    assert not list(tmp.iterdir())

    killed = subprocess.run([sys.executable, "-c", _SERVE_ONE_ENGINE, "killed", str(bundle)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == 0, killed.stderr
    left = list(tmp.glob("farm-gate-*"))
    assert len(left) == 1 and (left[0] / "bundle.litertlm").exists()  # the control: a killed process leaks
    alive = subprocess.Popen(["sleep", "30"])
    try:
        kept = tmp / f"farm-gate-{alive.pid}-abc"
        kept.mkdir()
        (tmp / "farm-gate-nopid").mkdir()
        assert common.sweep_engine_folders(tmp) == left
        assert kept.exists() and (tmp / "farm-gate-nopid").exists() and not left[0].exists()
    finally:
        alive.kill()
        alive.wait()
    assert common.sweep_engine_folders(tmp) == [kept]
