"""The two-environment rule, checked statically: the toolchain side never imports the orchestrator
(prefect, farm) and the orchestrator never imports the toolchain (torch, litert)."""

import ast
from pathlib import Path

import pytest
from farmtest import REPO

ROOT = REPO


def _imports(folder: Path) -> dict[str, set[str]]:
    found = {}
    for py in folder.rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(py.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # farm_toolchain.protocol is the shared, stdlib-only contract: both sides use it.
                if node.module != "farm_toolchain.protocol":
                    names.add(node.module.split(".")[0])
        found[str(py.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize(
    "folder,forbidden",
    [
        ("farm_toolchain", {"prefect", "farm", "flows", "tasks", "sqlalchemy", "boto3"}),
        ("farm", {"torch", "litert_torch", "litert_lm", "litert_lm_builder", "ai_edge_quantizer", "transformers", "farm_toolchain"}),
        ("flows", {"torch", "litert_torch", "litert_lm", "transformers"}),
        ("tasks", {"torch", "litert_torch", "litert_lm", "transformers"}),
    ],
)
def test_environment_boundaries(folder, forbidden):
    offenders = {f: sorted(names & forbidden) for f, names in _imports(ROOT / folder).items() if names & forbidden}
    assert not offenders, f"{folder} imports across the env boundary: {offenders}"


@pytest.mark.parametrize("folder", ["flows", "tasks", "farm"])
def test_only_the_lineage_package_talks_sql(folder):
    """Flows, tasks, stages, gates and cards ask lineage named questions (farm/lineage/queries.py,
    record.py); only farm/lineage/ imports SQLAlchemy or the lineage models."""
    offenders = {}
    for py in (ROOT / folder).rglob("*.py"):
        rel = py.relative_to(ROOT)
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
