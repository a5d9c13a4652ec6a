"""farm_toolchain/commands.py: the toolchain's commands, one registered unit per module, each with the
environment its requests run under. Listing them imports only the standard library, and importing
them changes nothing in os.environ (command modules used to set HF_HUB_OFFLINE at import, which
leaked into every later request of the same server and into test processes)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from farm_common.registry import Registry
from farm_toolchain import protocol
from farm_toolchain.commands import COMMANDS, OFFLINE, QUIET
from farm_toolchain.protocol import BadInput

NAMES = {"check_recipe", "cpu_view", "sensitivity", "export", "export_options", "fetch_hf", "gate", "hub_info", "hub_upload", "import_gguf",
         "make_model", "package", "quantize", "versions"}
LOCAL_ONLY = {"export", "package", "import_gguf", "make_model", "gate", "sensitivity"}
HUB = {"fetch_hf", "hub_info", "hub_upload"}
ENV_KEYS = (*OFFLINE, *QUIET)


def environ_changes(action: Callable[[], object]) -> dict[str, tuple[str | None, str | None]]:
    """{key: (before, after)} for every os.environ key that `action` changed."""
    before = dict(os.environ)
    action()
    after = dict(os.environ)
    return {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


@pytest.fixture
def fresh_toolchain(monkeypatch: pytest.MonkeyPatch):
    """farm_toolchain imported afresh (its modules out of sys.modules for the test, the originals put
    back afterwards), with the variables a command module might set absent, so an import that sets
    one shows."""
    for key in ENV_KEYS:
        monkeypatch.setenv(key, "placeholder")
        monkeypatch.delenv(key)

    def ours(name: str) -> bool:
        return name == "farm_toolchain" or name.startswith("farm_toolchain.")

    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    yield
    for k in [k for k in sys.modules if ours(k)]:
        del sys.modules[k]
    sys.modules.update(saved)


# --- the registry ----------------------------------------------------------------------------------


def test_the_commands_are_the_command_modules():
    assert set(COMMANDS.names()) == NAMES
    for name, command in COMMANDS.load().items():
        assert command.name == name and callable(command.handle)


def test_commands_that_read_local_folders_only_run_offline():
    for name in LOCAL_ONLY:
        env = COMMANDS.get(name).env
        assert env.get("HF_HUB_OFFLINE") == "1" and env.get("TRANSFORMERS_OFFLINE") == "1", name


def test_hub_commands_do_not_force_offline():
    for name in HUB:
        env = COMMANDS.get(name).env
        assert "HF_HUB_OFFLINE" not in env and "TRANSFORMERS_OFFLINE" not in env, name


def test_every_command_gets_the_quiet_defaults_as_defaults_not_as_env():
    for command in COMMANDS:
        assert command.defaults == QUIET, command.name
        assert not set(command.env) & set(QUIET), command.name


def test_an_offline_command_runs_its_request_offline_and_a_hub_command_does_not(monkeypatch):
    for key in OFFLINE:
        monkeypatch.delenv(key, raising=False)

    def probe(_request):
        return {"offline": os.environ.get("HF_HUB_OFFLINE"), "telemetry": os.environ.get("HF_HUB_DISABLE_TELEMETRY")}

    export, fetch = COMMANDS.get("export"), COMMANDS.get("fetch_hf")
    got, _ = protocol.handle_one(probe, {}, export.env, export.defaults)
    assert got["offline"] == "1"
    got, _ = protocol.handle_one(probe, {}, fetch.env, fetch.defaults)
    assert got["offline"] is None
    # A fetch after an export in the same server process is not offline: nothing leaked.
    assert "HF_HUB_OFFLINE" not in os.environ


def test_an_unknown_command_is_bad_input_naming_the_commands():
    with pytest.raises(BadInput, match=r"unknown toolchain command 'exprot': the commands are check_recipe, cpu_view, export, "):
        COMMANDS.get("exprot")


# --- importing changes nothing ---------------------------------------------------------------------


def test_importing_every_command_module_leaves_os_environ_alone(fresh_toolchain):
    # A new registry: every command module imports again.
    from farm_toolchain.commands import COMMANDS as fresh

    assert fresh is not COMMANDS
    changes = environ_changes(fresh.load)
    assert changes == {}
    imported = {m for m in sys.modules if m.startswith("farm_toolchain.")}
    assert {f"farm_toolchain.{name}" for name in ("export", "fetch_hf", "gate", "package", "versions")} <= imported
    assert not {"torch", "transformers", "litert_lm", "litert_torch"} & set(sys.modules)


def test_environ_changes_sees_a_module_that_sets_os_environ_at_import(tmp_path: Path, monkeypatch):
    # The negative control: the same check over a crafted package whose unit sets a variable at import.
    pkg = f"farmtest_leaky_{uuid.uuid4().hex[:10]}"
    key = f"FARMTEST_LEAK_{uuid.uuid4().hex[:6].upper()}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text(
        "from farm_common.registry import Registry\nREG = Registry('x', __name__)\n")
    (tmp_path / pkg / "leaky.py").write_text(
        f"import os\nfrom {pkg} import REG\nos.environ[{key!r}] = '1'\n\n"
        "@REG.register('leaky')\ndef handle(r):\n    return r\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import importlib

        reg: Registry = importlib.import_module(pkg).REG
        assert environ_changes(reg.load) == {key: (None, "1")}
        assert reg.names() == ["leaky"]
    finally:
        os.environ.pop(key, None)
        for m in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
            del sys.modules[m]
