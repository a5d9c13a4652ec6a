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
