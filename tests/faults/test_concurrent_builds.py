"""Four identical builds at once — into one fresh FARM_HOME (SQLite lineage, the temporary Prefect
servers of the embedded default) and into one fresh PostgreSQL lineage DB — all succeed, record one
artifact row, run each stage once and measure each gate once (the others wait on its lease and
reuse its result); the first also benchmarks the one device once and all four publish one card
(issue 19: four device runs and four cards of the same bytes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text

from farmtest import REPO, farm_env

pytestmark = pytest.mark.slow


def _four_builds(env: dict[str, str], tmp_path, bench: bool = False) -> list[dict]:
    # Output to files, not pipes: a pipe nobody reads fills up, and a build blocked writing its log
    # while it holds a lease stalls the three waiting for it (seen here with communicate() in turn).
    files = [(open(tmp_path / f"out{i}", "w+"), open(tmp_path / f"err{i}", "w+")) for i in range(4)]
    procs = [subprocess.Popen([sys.executable, "-m", "farm_cli", "build", "examples/tiny-qwen35.yaml", "--json",
                               *([] if bench else ["--no-bench"])], env=env, cwd=REPO, stdout=out, stderr=err, text=True)
             for out, err in files]
    codes = [p.wait(timeout=900) for p in procs]
    texts = []
    for out, err in files:
        out.seek(0), err.seek(0)
        texts.append((out.read(), err.read()))
        out.close(), err.close()
    assert codes == [0] * 4, [err[-1500:] for _out, err in texts]
    return [json.loads(out) for out, _err in texts]


def _counts(url: str) -> tuple[int, dict[str, int]]:
    engine = create_engine(url)
    with engine.connect() as c:
        bundles = c.execute(text("SELECT count(*) FROM artifacts WHERE kind = 'litertlm'")).scalar()
        gates = dict(c.execute(text("SELECT gate, count(*) FROM gate_results GROUP BY gate")).all())
        leases = c.execute(text("SELECT count(*) FROM leases")).scalar()
        cards = c.execute(text("SELECT count(*) FROM artifacts WHERE kind = 'card'")).scalar()
        runs = c.execute(text("SELECT count(*) FROM device_results")).scalar()
    engine.dispose()
    assert leases == 0  # every lease released
    assert cards == 1, f"{cards} cards of the same bytes"
    return bundles, gates, runs


def _check(outs: list[dict], built, url: str, bench: bool = False) -> None:
    assert {o["artifact"]["sha256"] for o in outs} == {built.sha256}
    for stage in ("convert", "quantize", "package", "hash"):
        ran = [s["status"] for o in outs for s in o["stages"] if s["name"] == stage]
        assert ran.count("ran") == 1, (stage, ran)
    bundles, gates, runs = _counts(url)
    assert bundles == 1 and set(gates.values()) == {1}, gates
    if bench:  # one device (local-cpu, one accelerator): one run, three reuses
        assert runs == 1, f"{runs} device runs of the same bytes"
        assert sorted(len(o["devices"]) for o in outs) == [1, 1, 1, 1]
    for gate in gates:
        assert sum(not g["reused"] for o in outs for g in o["gates"] if g["gate"] == gate) == 1


def test_four_identical_builds_into_one_fresh_farm_home(built, tmp_path):
    env = farm_env(tmp_path / "home")  # no PREFECT_API_URL: each command's own temporary server
    _check(_four_builds(env, tmp_path, bench=True), built, f"sqlite:///{tmp_path / 'home' / 'lineage.db'}", bench=True)


def test_four_identical_builds_into_one_fresh_postgresql(built, tmp_path, pg_factory, prefect_server):
    url = pg_factory().replace("postgresql://", "postgresql+psycopg://")
    env = farm_env(tmp_path / "home", prefect_server, FARM_DATABASE_URL=url)
    _check(_four_builds(env, tmp_path), built, url)
