"""farm_common/registry.py: one way for every extension point to register its units and find them.

Discovery is tested on throwaway packages written under tmp_path (one module per unit), with the
registry object handed to them through a fake module in sys.modules, so each test builds the
Registry it needs in Python."""

from __future__ import annotations

import sys
import textwrap
import types
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from farm_common.registry import Registry, UnknownUnit

UNIT = """\
from {hub} import REG

@REG.register({name!r}{attrs})
def unit():
    return {name!r}
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., tuple[str, Registry]]]:
    """make(files, **registry_kwargs) -> (package name, registry): a fresh package under tmp_path with
    the given modules (relative path -> source; '{hub}' in a source is the module that holds the
    registry as `REG`), and a Registry("widget", <package>, **registry_kwargs) over it. Every module
    it made is dropped from sys.modules afterwards."""
    made: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(files: dict[str, str], **registry_kwargs: Any) -> tuple[str, Registry]:
        name = f"farmtest_units_{uuid.uuid4().hex[:10]}"
        hub = f"{name}_hub"
        made.append(name)
        root = tmp_path / name
        root.mkdir()
        (root / "__init__.py").write_text("")
        for rel, source in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source).replace("{hub}", hub))
        reg = Registry("widget", name, **registry_kwargs)
        fake = types.ModuleType(hub)
        fake.REG = reg
        monkeypatch.setitem(sys.modules, hub, fake)
        return name, reg

    yield make
    for mod in [m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in made)]:
        del sys.modules[mod]


def unit(name: str, **attrs: Any) -> str:
    rendered = "".join(f", {k}={v!r}" for k, v in attrs.items())
    return UNIT.format(hub="{hub}", name=name, attrs=rendered)


# --- registering -----------------------------------------------------------------------------------


def test_register_returns_the_object_and_keeps_it_as_the_unit(package):
    _name, reg = package({})

    def handler():
        return 1

    assert reg.register("one")(handler) is handler
    assert reg.get("one") is handler
    assert reg.names() == ["one"] and "one" in reg and "two" not in reg and len(reg) == 1


def test_a_name_registered_twice_is_refused(package):
    _name, reg = package({})
    reg.register("one")(lambda: 1)
    with pytest.raises(RuntimeError, match="widget 'one' is registered twice"):
        reg.register("one")(lambda: 2)
    reg.register("two")(lambda: 2)  # another name is fine
    assert reg.names() == ["one", "two"]


def test_the_same_name_in_two_modules_is_refused_at_load(package):
    _name, reg = package({"a.py": unit("same"), "b.py": unit("same")})
    with pytest.raises(RuntimeError, match="'same' is registered twice"):
        reg.load()


def test_default_make_refuses_attributes(package):
    _name, reg = package({})
    with pytest.raises(TypeError, match=r"one: this registry takes no attributes \(kind, version\)"):
        reg.register("one", kind="x", version=2)(lambda: 1)
    reg.register("one")(lambda: 1)  # the same name without attrs is accepted: the refusal stored nothing
    assert reg.names() == ["one"]


def test_make_builds_the_unit_from_name_object_and_attrs(package):
    seen = []

    def make(name, obj, attrs):
        seen.append((name, obj, attrs))
        return {"name": name, "run": obj, **attrs}

    _name, reg = package({}, make=make)

    def handler():
        return "ran"

    assert reg.register("one", version=3, offline=True)(handler) is handler  # the decorated object, unchanged
    assert seen == [("one", handler, {"version": 3, "offline": True})]
    assert reg.get("one") == {"name": "one", "run": handler, "version": 3, "offline": True}


def test_registering_after_load_is_seen_by_the_next_load(package):
    _name, reg = package({"alpha.py": unit("alpha")})
    assert reg.names() == ["alpha"]
    reg.register("aardvark")(lambda: 0)
    assert reg.names() == ["aardvark", "alpha"]


# --- discovery -------------------------------------------------------------------------------------


def test_load_imports_every_unit_module_of_the_package(package):
    name, reg = package({
        "beta.py": unit("beta"),
        "alpha.py": unit("alpha"),
        "helpers.py": "VALUE = 1\n",  # declared support: registers nothing, allowed
        "_private.py": "raise AssertionError('a module starting with _ is not imported')\n",
        "sub/__init__.py": "raise AssertionError('a subpackage is not imported')\n",
    }, support=("helpers",))
    units = reg.load()
    assert list(units) == ["alpha", "beta"]  # by name, not by file or import order
    assert units["alpha"]() == "alpha" and units["beta"]() == "beta"
    assert f"{name}.helpers" in sys.modules
    assert f"{name}._private" not in sys.modules and f"{name}.sub" not in sys.modules
    assert [u() for u in reg] == ["alpha", "beta"] and len(reg) == 2


def test_load_imports_each_module_once(package):
    name, reg = package({"alpha.py": "import {hub} as hub\nhub.IMPORTS.append(__name__)\n" + unit("alpha")})
    hub = sys.modules[f"{name}_hub"]
    hub.IMPORTS = []
    reg.load()
    reg.load()
    reg.names()
    assert "alpha" in reg
    assert hub.IMPORTS == [f"{name}.alpha"]


def test_a_unit_module_that_registers_nothing_is_an_error_at_load(package):
    name, reg = package({"alpha.py": unit("alpha"), "forgot.py": "def unit():\n    return 1\n"})
    with pytest.raises(RuntimeError, match=rf"{name}\.forgot registers no widget: register one, or declare it "
                                           "support of the widget registry"):
        reg.load()


def test_the_same_module_declared_support_loads(package):
    # The control of the test above: the only difference is the declaration.
    _name, reg = package({"alpha.py": unit("alpha"), "forgot.py": "def unit():\n    return 1\n"},
                         support=("forgot",))
    assert reg.names() == ["alpha"]


def test_a_unit_module_that_registers_an_object_made_elsewhere_counts_as_registering(package):
    _name, reg = package({"wrapped.py": """\
        import functools
        import os.path
        from {hub} import REG

        REG.register("joined")(functools.partial(os.path.join, "root"))
    """})
    assert reg.names() == ["joined"]


# --- order -----------------------------------------------------------------------------------------


def test_order_sorts_by_the_declared_key_then_by_name(package):
    def make(name, obj, attrs):
        return types.SimpleNamespace(name=name, **attrs)

    _name, reg = package({
        "a_last.py": unit("a_last", order=90),
        "m_first.py": unit("m_first", order=1),
        "z_tie.py": unit("z_tie", order=50),
        "b_tie.py": unit("b_tie", order=50),
    }, make=make, order=lambda u: u.order)
    assert reg.names() == ["m_first", "b_tie", "z_tie", "a_last"]


def test_without_order_units_sort_by_name(package):
    def make(name, obj, attrs):
        return types.SimpleNamespace(name=name, **attrs)

    _name, reg = package({"a_last.py": unit("a_last", order=90), "m_first.py": unit("m_first", order=1)},
                         make=make)
    assert reg.names() == ["a_last", "m_first"]


# --- get -------------------------------------------------------------------------------------------


def test_get_of_an_unknown_name_raises_the_configured_error_listing_the_known_names(package):
    class Refused(Exception):
        pass

    _name, reg = package({"beta.py": unit("beta"), "alpha.py": unit("alpha")}, error=Refused, plural="gadgetry")
    assert reg.get("alpha")() == "alpha"
    with pytest.raises(Refused) as info:
        reg.get("gamma")
    assert str(info.value) == "unknown widget 'gamma': the gadgetry are alpha, beta"


def test_get_defaults_to_unknown_unit_and_says_none_when_empty(package):
    _name, reg = package({})
    with pytest.raises(UnknownUnit, match=r"^unknown widget 'x': the widgets are none$"):
        reg.get("x")
    assert issubclass(UnknownUnit, LookupError)
    reg.register("x")(lambda: 1)
    assert reg.get("x")() == 1
