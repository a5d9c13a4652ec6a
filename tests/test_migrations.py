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
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "db", "upgrade"], env=env, capture_output=True, text=True)
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
