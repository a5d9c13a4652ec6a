"""`alembic upgrade head` on an empty database, and no drift between models and migrations."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from farm.lineage.db import upgrade
from farm.lineage.models import Base


def _drift(url: str) -> list:
    engine = create_engine(url)
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    return diffs


def test_upgrade_head_on_empty_postgres_has_no_drift(pg_url):
    upgrade(pg_url)
    engine = create_engine(pg_url)
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    assert {"artifacts", "sections", "sources", "recipes", "toolchains", "stage_cache", "artifact_inputs"} <= tables
    assert _drift(pg_url) == []


def test_upgrade_head_on_sqlite_has_no_drift(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    upgrade(url)  # idempotent
    assert _drift(url) == []


def test_schema_head_is_alembics_head():
    from alembic.script import ScriptDirectory

    from farm.lineage.db import SCHEMA_HEAD, alembic_config

    assert ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head() == SCHEMA_HEAD


def test_db_upgrade_works_on_a_fresh_farm_home(tmp_path):
    """`farm db upgrade` before anything else: the SQLite folder does not exist yet."""
    import subprocess
    import sys

    env = {"FARM_HOME": str(tmp_path / "new" / "home"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "farm_cli", "db", "upgrade"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "new" / "home" / "lineage.db").is_file()


def test_concurrent_first_opens_of_one_database_all_succeed(tmp_path, pg_factory):
    """Four processes open one fresh database at once (SQLite and PostgreSQL): the migration is
    serialized, none fails."""
    import subprocess
    import sys

    code = "import sys; from farm.lineage.db import Database; Database(sys.argv[1]); print('ok')"
    for url in (f"sqlite:///{tmp_path / 'fresh.db'}", pg_factory()):
        procs = [subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(4)]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, [o[1][-500:] for o in outs]
        assert _drift(url) == []


def test_0008_puts_existing_bundles_into_chains_and_takes_imports_out(tmp_path):
    """Rows written by 0007 (name-based "previous file"): farm-built bundles join the chain their
    name and recipe imply, numbered oldest first; an import that superseded a farm file by sharing
    its name supersedes nothing afterwards."""
    from alembic import command
    from sqlalchemy import text

    from farm.lineage.db import alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0007")
    engine = create_engine(url)
    with engine.begin() as c:
        c.execute(text("INSERT INTO recipes (digest, name, body, rendered, created_at) VALUES ('d', 'r1', '{}', '[]', '2026-01-01')"))
        rows = [("a" * 64, "Tiny_r1.litertlm", "d", None, 0, "2026-01-01"),
                ("b" * 64, "Tiny_r1.litertlm", "d", "a" * 64, 0, "2026-01-02"),
                ("c" * 64, "Tiny_r1.litertlm", None, "b" * 64, 1, "2026-01-03")]
        for sha, name, recipe, sup, imported, at in rows:
            c.execute(text("INSERT INTO artifacts (sha256, kind, size, uri, name, recipe_digest, details, "
                           "supersedes_sha256, imported, created_at) VALUES (:s, 'litertlm', 1, 'file:///x', :n, :r, "
                           "'{}', :p, :i, :t)"), {"s": sha, "n": name, "r": recipe, "p": sup, "i": imported, "t": at})
    upgrade(url)
    with engine.connect() as c:
        got = {r[0][0]: r[1:] for r in c.execute(text("SELECT sha256, chain, chain_seq, supersedes_sha256, model_id "
                                                      "FROM artifacts"))}
    engine.dispose()
    assert got == {"a": ("tiny/r1", 1, None, "tiny"), "b": ("tiny/r1", 2, "a" * 64, "tiny"), "c": (None, None, None, None)}
    assert _drift(url) == []
