"""The house rules, checked statically over the source, each with a negative control (the same
checker on a crafted tree fails):

- the two environments: the toolchain side never imports the orchestrator (prefect, farm) and the
  orchestrator never imports the toolchain (torch, litert); farm_common imports neither;
- only farm/lineage/ talks SQL;
- no import circle anywhere in the house (every import counts: module level, inside a function,
  under TYPE_CHECKING);
- layers: the library (farm/) never imports the flows or the CLI; the tasks (flows/tasks/) never
  import a flow; the flows never import the CLI;
- only the CLI's entry and the toolchain's request handling write os.environ, and only
  farm/settings.py reads FARM_* variables.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

import pytest

from farmtest import REPO

PACKAGES = ("farm", "flows", "farm_cli", "farm_common", "farm_toolchain")


def _sources(root: Path, packages=PACKAGES) -> dict[str, tuple[Path, ast.Module]]:
    """module name -> (file, parsed source) for every .py of the packages under root."""
    out = {}
    for pkg in packages:
        for py in sorted((root / pkg).rglob("*.py")):
            parts = py.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = (py, ast.parse(py.read_text(encoding="utf-8")))
    return out


def _imported(node: ast.AST, module: str, is_pkg: bool) -> list[str]:
    """The dotted names one import statement asks for (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_pkg else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        return [f"{base}.{a.name}" for a in node.names] + [base]
    return []


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> the house's modules it imports (a name that is a module of the house, else its
    longest prefix that is one)."""
    sources = _sources(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for module, (path, tree) in sources.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            for name in _imported(node, module, is_pkg):
                parts = name.split(".")
                while parts and ".".join(parts) not in sources:
                    parts.pop()
                target = ".".join(parts)
                if target and target != module:
                    graph[module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _top_imports(root: Path, folder: str) -> dict[str, set[str]]:
    """file -> the top-level names it imports (absolute imports only)."""
    found = {}
    for py in (root / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(py.relative_to(root))] = names
    return found


def _shared_contract(module: str) -> bool:
    # What both environments may import: farm_common (the wire, the gates' settings, the registry).
    # No exception beside it: the wire (farm_common/wire.py) is where DONE_MARKER and BadInput live.
    return module.split(".")[0] == "farm_common"


def env_offenders(root: Path, folder: str, forbidden: set[str]) -> dict[str, list[str]]:
    offenders = {}
    for py in (root / folder).rglob("*.py"):
        bad = set()
        for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            bad |= {n.split(".")[0] for n in names if not _shared_contract(n)} & forbidden
        if bad:
            offenders[str(py.relative_to(root))] = sorted(bad)
    return offenders


ORCHESTRATOR_ONLY = {"prefect", "farm", "flows", "farm_cli", "sqlalchemy", "boto3", "alembic", "fastapi"}
TOOLCHAIN_ONLY = {"torch", "litert_torch", "litert_lm", "litert_lm_builder", "ai_edge_quantizer", "ai_edge_litert",
                  "transformers", "farm_toolchain"}


@pytest.mark.parametrize("folder,forbidden", [
    ("farm_toolchain", ORCHESTRATOR_ONLY),
    ("farm", TOOLCHAIN_ONLY),
    ("farm_cli", TOOLCHAIN_ONLY),
    ("flows", TOOLCHAIN_ONLY),
    ("farm_common", ORCHESTRATOR_ONLY | TOOLCHAIN_ONLY),
])
def test_environment_boundaries(folder, forbidden):
    offenders = env_offenders(REPO, folder, forbidden)
    assert not offenders, f"{folder} imports across the env boundary: {offenders}"


def test_farm_common_imports_only_the_standard_library_and_pydantic():
    import sys

    allowed = set(sys.stdlib_module_names) | {"pydantic", "farm_common", "__future__"}
    offenders = {f: sorted(n - allowed) for f, n in _top_imports(REPO, "farm_common").items() if n - allowed}
    assert not offenders, f"farm_common must import in both environments: {offenders}"


def test_the_env_boundary_check_fails_on_a_crafted_import(tmp_path):
    (tmp_path / "farm_toolchain").mkdir()
    (tmp_path / "farm_toolchain" / "bad.py").write_text("from farm.config import load_config\n")
    (tmp_path / "farm_toolchain" / "ok.py").write_text("from farm_toolchain.protocol import BadInput\n"
                                                       "from farm_common.registry import Registry\n")
    assert env_offenders(tmp_path, "farm_toolchain", ORCHESTRATOR_ONLY) == {"farm_toolchain/bad.py": ["farm"]}
    # The orchestrator reaching into the toolchain's package, even for its protocol, is an arrow across.
    (tmp_path / "farm").mkdir()
    (tmp_path / "farm" / "client.py").write_text("from farm_toolchain.protocol import DONE_MARKER\n"
                                                 "from farm_common.wire import Reply\n")
    assert env_offenders(tmp_path, "farm", TOOLCHAIN_ONLY) == {"farm/client.py": ["farm_toolchain"]}


@pytest.mark.parametrize("folder", ["flows", "farm", "farm_cli"])
def test_only_the_lineage_package_talks_sql(folder):
    """Flows, tasks, stages, gates and cards ask lineage named questions (farm/lineage/queries/,
    record.py); only farm/lineage/ imports SQLAlchemy or the lineage models."""
    offenders = {}
    for py in (REPO / folder).rglob("*.py"):
        rel = py.relative_to(REPO)
        if rel.parts[:2] == ("farm", "lineage"):
            continue
        for node in ast.walk(ast.parse(py.read_text())):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            bad = [m for m in mods if m.split(".")[0] in ("sqlalchemy", "alembic") or m == "farm.lineage.models"]
            if bad:
                offenders.setdefault(str(rel), []).extend(bad)
    assert not offenders, f"SQL outside farm/lineage/: {offenders}"


# --- no import circle ------------------------------------------------------------------------------


def test_no_import_circle_in_the_house():
    found = circles(import_graph(REPO))
    assert not found, "modules that import each other in a circle: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_circle_check_finds_a_crafted_circle_through_a_lazy_import(tmp_path):
    pkg = tmp_path / "farm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("from farm.gates import spec\n")
    (pkg / "gates.py").write_text("def spec():\n    from farm import suite\n")
    (pkg / "suite.py").write_text("from .config import digest\n")
    (pkg / "leaf.py").write_text("import farm.config\n")
    assert circles(import_graph(tmp_path, ("farm",))) == [["farm.config", "farm.gates", "farm.suite"]]


# --- layers --------------------------------------------------------------------------------------------

# package -> the packages it must never import (the entry points sit on top: farm_cli, flows/serve)
LAYERS = {"farm": {"flows", "farm_cli"}, "flows": {"farm_cli"},
          "farm_common": {"farm", "flows", "farm_cli", "farm_toolchain"}}
# The tasks live beside the flows that use them (flows/tasks/) and sit below them: a task never
# imports a flow (flows.tasks -> flows.<anything but flows.tasks> runs back up).
TASKS = "flows.tasks"


def _runs_back_up(module: str, target: str) -> bool:
    if target.split(".")[0] in LAYERS.get(module.split(".")[0], ()):
        return True
    in_tasks = module == TASKS or module.startswith(TASKS + ".")
    return in_tasks and target.split(".")[0] == "flows" and not (target == TASKS or target.startswith(TASKS + "."))


def layer_offenders(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets if _runs_back_up(m, t))


def test_the_library_never_imports_its_entry_points():
    offenders = layer_offenders(import_graph(REPO))
    assert not offenders, f"imports that run back up: {offenders}"


def test_the_layer_check_fails_on_a_crafted_upward_import(tmp_path):
    for pkg, body in (("farm", "def f():\n    from flows.build import build\n"), ("flows", "")):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
        (tmp_path / pkg / "m.py").write_text(body)
    (tmp_path / "flows" / "build.py").write_text("")
    (tmp_path / "flows" / "tasks").mkdir()
    (tmp_path / "flows" / "tasks" / "__init__.py").write_text("")
    (tmp_path / "flows" / "tasks" / "common.py").write_text("")
    (tmp_path / "flows" / "tasks" / "stages.py").write_text("from flows.tasks.common import x\nfrom flows.build import build\n")
    assert layer_offenders(import_graph(tmp_path, ("farm", "flows"))) == ["farm.m -> flows.build",
                                                                         "flows.tasks.stages -> flows.build"]


# --- the environment and FARM_* variables ---------------------------------------------------------------

# Where os.environ may be written: the CLI's entry (its process), the toolchain's request handling.
ENVIRON_WRITERS = ("farm_cli/", "farm_toolchain/protocol.py")


def _environ_writes(tree: ast.Module) -> list[int]:
    """Lines that write os.environ: an item assignment or deletion, or a mutating method call."""
    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ"
                and isinstance(node.value, ast.Name) and node.value.id == "os")

    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else (
            [node.target] if isinstance(node, ast.AugAssign) else [])
        if any(isinstance(t, ast.Subscript) and is_environ(t.value) for t in targets):
            lines.append(node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_environ(node.func.value)
                and node.func.attr in ("setdefault", "update", "pop", "clear", "popitem")):
            lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "putenv":
            lines.append(node.lineno)
    return lines


def _lines_where(root: Path, packages, allowed: Callable[[str], bool],
                 find: Callable[[ast.Module], list[int]]) -> dict[str, list[int]]:
    """file -> the lines `find` reports in it, for every file `allowed` does not exempt."""
    out = {}
    for _module, (path, tree) in _sources(root, packages).items():
        rel = path.relative_to(root).as_posix()
        if not allowed(rel) and (lines := find(tree)):
            out[rel] = lines
    return out


def environ_offenders(root: Path, packages=PACKAGES) -> dict[str, list[int]]:
    return _lines_where(root, packages, lambda rel: rel.startswith(ENVIRON_WRITERS), _environ_writes)


def test_only_the_entry_and_the_toolchain_request_handling_write_the_environment():
    assert not environ_offenders(REPO), environ_offenders(REPO)


def test_the_environment_check_fails_on_a_crafted_write(tmp_path):
    (tmp_path / "farm_toolchain").mkdir()
    (tmp_path / "farm_toolchain" / "export.py").write_text(
        'import os\nos.environ["HF_HUB_OFFLINE"] = "1"\n\ndef f():\n    os.environ.setdefault("X", "1")\n')
    (tmp_path / "farm_toolchain" / "protocol.py").write_text('import os\nos.environ["A"] = "1"\n')
    assert environ_offenders(tmp_path, ("farm_toolchain",)) == {"farm_toolchain/export.py": [2, 5]}


def _farm_reads(tree: ast.Module) -> list[int]:
    """Lines that read a FARM_* name: env.get("FARM_…") / os.getenv("FARM_…") / env["FARM_…"]."""
    def farm(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and str(node.value).startswith("FARM_")

    return sorted({n.lineno for n in ast.walk(tree)
                   if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                       and n.func.attr in ("get", "getenv") and n.args and farm(n.args[0]))
                   or (isinstance(n, ast.Subscript) and farm(n.slice))})


def farm_variable_readers(root: Path, packages=PACKAGES) -> dict[str, list[int]]:
    """Lines outside farm/settings.py that read a FARM_* variable from the environment."""
    return _lines_where(root, packages, lambda rel: rel == "farm/settings.py", _farm_reads)


def test_farm_variables_are_read_through_settings_only():
    assert not farm_variable_readers(REPO), farm_variable_readers(REPO)


def test_the_settings_door_check_fails_on_a_crafted_reader(tmp_path):
    (tmp_path / "farm").mkdir()
    (tmp_path / "farm" / "leases.py").write_text('import os\nTTL = os.environ.get("FARM_LEASE_STALE_SECONDS")\n')
    (tmp_path / "farm" / "settings.py").write_text('import os\nHOME = os.environ["FARM_HOME"]\n')
    assert farm_variable_readers(tmp_path, ("farm",)) == {"farm/leases.py": [2]}
