"""farm_toolchain/protocol.py: each request runs under its command's environment, set for that request
only; every outcome of a handler is one result object and an exit code."""

from __future__ import annotations

import os
import sys
import types

import pytest

from farm_toolchain.protocol import BadInput, handle_one, request_env

KEYS = ("FARMTEST_ENV_A", "FARMTEST_ENV_B", "FARMTEST_ENV_C", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys these tests use start absent, and are put back as they were afterwards."""
    for key in KEYS:
        monkeypatch.setenv(key, "placeholder")  # recorded by monkeypatch, restored on undo
        monkeypatch.delenv(key)


@pytest.fixture
def hub_constants(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A stand-in for a loaded huggingface_hub.constants (its offline flag is read at import)."""
    fake = types.ModuleType("huggingface_hub.constants")
    fake.HF_HUB_OFFLINE = False
    monkeypatch.setitem(sys.modules, "huggingface_hub.constants", fake)
    return fake


# --- request_env -----------------------------------------------------------------------------------


def test_env_is_set_for_the_request_and_absent_keys_are_removed_afterwards():
    with request_env({"FARMTEST_ENV_A": "1"}):
        assert os.environ["FARMTEST_ENV_A"] == "1"
    assert "FARMTEST_ENV_A" not in os.environ


def test_env_overrides_the_callers_value_for_the_request_then_puts_it_back(monkeypatch):
    monkeypatch.setenv("FARMTEST_ENV_A", "caller")
    with request_env({"FARMTEST_ENV_A": "request"}):
        assert os.environ["FARMTEST_ENV_A"] == "request"
    assert os.environ["FARMTEST_ENV_A"] == "caller"


def test_defaults_do_not_override_what_the_caller_set(monkeypatch):
    monkeypatch.setenv("FARMTEST_ENV_B", "caller")
    with request_env({}, {"FARMTEST_ENV_B": "default", "FARMTEST_ENV_C": "default"}):
        assert os.environ["FARMTEST_ENV_B"] == "caller"
        assert os.environ["FARMTEST_ENV_C"] == "default"  # the control: where the caller said nothing
    assert os.environ["FARMTEST_ENV_B"] == "caller"
    assert "FARMTEST_ENV_C" not in os.environ


def test_the_environment_is_restored_when_the_request_raises(monkeypatch):
    monkeypatch.setenv("FARMTEST_ENV_B", "caller")
    env, defaults = {"FARMTEST_ENV_A": "1", "FARMTEST_ENV_B": "request"}, {"FARMTEST_ENV_C": "d"}
    with pytest.raises(RuntimeError, match="boom"), request_env(env, defaults):
        raise RuntimeError("boom")
    assert "FARMTEST_ENV_A" not in os.environ and "FARMTEST_ENV_C" not in os.environ
    assert os.environ["FARMTEST_ENV_B"] == "caller"


def test_a_key_the_request_changes_itself_is_put_back_too():
    with request_env({"FARMTEST_ENV_A": "1"}):
        os.environ["FARMTEST_ENV_A"] = "changed by the handler"
    assert "FARMTEST_ENV_A" not in os.environ


def test_a_loaded_hub_constants_module_follows_the_offline_flag(hub_constants):
    with request_env({"HF_HUB_OFFLINE": "1"}):
        assert hub_constants.HF_HUB_OFFLINE is True
    assert hub_constants.HF_HUB_OFFLINE is False
    # TRANSFORMERS_OFFLINE counts too.
    with request_env({"TRANSFORMERS_OFFLINE": "yes"}):
        assert hub_constants.HF_HUB_OFFLINE is True
    assert hub_constants.HF_HUB_OFFLINE is False


def test_hub_constants_stay_online_for_a_request_that_does_not_go_offline(hub_constants):
    hub_constants.HF_HUB_OFFLINE = True  # a stale copy is corrected to what the environment says
    with request_env({"FARMTEST_ENV_A": "1"}, {"HF_HUB_DISABLE_TELEMETRY": "1"}):
        assert hub_constants.HF_HUB_OFFLINE is False
    with request_env({"HF_HUB_OFFLINE": "0"}):
        assert hub_constants.HF_HUB_OFFLINE is False


def test_hub_constants_keep_the_callers_offline_flag_after_the_request(monkeypatch, hub_constants):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with request_env({"HF_HUB_OFFLINE": "1"}):
        assert hub_constants.HF_HUB_OFFLINE is True
    assert os.environ["HF_HUB_OFFLINE"] == "1" and hub_constants.HF_HUB_OFFLINE is True


def test_request_env_imports_no_hub_module():
    had = {m: m in sys.modules for m in ("huggingface_hub", "huggingface_hub.constants")}
    with request_env({"HF_HUB_OFFLINE": "1"}):
        pass
    assert {m: m in sys.modules for m in had} == had


# --- handle_one ------------------------------------------------------------------------------------


def test_handle_one_returns_ok_and_the_handlers_fields_with_exit_0():
    seen = []

    def handler(request):
        seen.append(request)
        return {"answer": request["x"] * 2}

    assert handle_one(handler, {"x": 21}) == ({"ok": True, "answer": 42}, 0)
    assert seen == [{"x": 21}]


def test_handle_one_runs_the_handler_under_the_commands_env(monkeypatch):
    monkeypatch.setenv("FARMTEST_ENV_B", "caller")

    def handler(_request):
        return {"a": os.environ.get("FARMTEST_ENV_A"), "b": os.environ.get("FARMTEST_ENV_B"),
                "c": os.environ.get("FARMTEST_ENV_C")}

    result, code = handle_one(handler, {}, {"FARMTEST_ENV_A": "1"}, {"FARMTEST_ENV_B": "d", "FARMTEST_ENV_C": "d"})
    assert (result, code) == ({"ok": True, "a": "1", "b": "caller", "c": "d"}, 0)
    assert "FARMTEST_ENV_A" not in os.environ and "FARMTEST_ENV_C" not in os.environ


def test_bad_input_from_the_handler_is_exit_2():
    def handler(_request):
        raise BadInput("model_dir /nowhere does not exist")

    assert handle_one(handler, {}) == (
        {"ok": False, "error": "model_dir /nowhere does not exist", "error_kind": "bad_input"}, 2)


@pytest.mark.parametrize("request_", [[1, 2], "text", None, 3])
def test_a_request_that_is_not_an_object_is_bad_input_and_the_handler_does_not_run(request_):
    def handler(_request):
        raise AssertionError("must not run")

    assert handle_one(handler, request_) == (
        {"ok": False, "error": "the request must be a JSON object", "error_kind": "bad_input"}, 2)


def test_another_exception_is_failed_exit_1_with_one_line(capsys):
    def handler(_request):
        raise ValueError("first line\nsecond line\nthird")

    result, code = handle_one(handler, {})
    assert (result, code) == ({"ok": False, "error": "ValueError: first line", "error_kind": "failed"}, 1)
    err = capsys.readouterr().err
    assert "Traceback" in err and "second line" in err  # the full story goes to stderr


def test_an_exception_without_a_message_still_names_its_type(capsys):
    def handler(_request):
        raise KeyError()

    assert handle_one(handler, {}) == ({"ok": False, "error": "KeyError: ", "error_kind": "failed"}, 1)


def test_the_environment_is_restored_after_a_failed_request():
    def handler(_request):
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        raise RuntimeError("export crashed")

    result, code = handle_one(handler, {}, {"HF_HUB_OFFLINE": "1"})
    assert code == 1 and result["error"] == "RuntimeError: export crashed"
    assert "HF_HUB_OFFLINE" not in os.environ
