"""Lineage queries that run on every `farm revalidate` print nothing to the terminal: the release
list once compiled a column-level DISTINCT that SQLAlchemy warns about (an SAWarning on stderr)."""

from __future__ import annotations

import warnings

from farm.lineage.db import Database
from farm.lineage.queries import recorded_runtime_versions


def test_the_recorded_runtime_releases_query_raises_no_sqlalchemy_warning(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with db.session() as s:
            assert recorded_runtime_versions(s) == []
