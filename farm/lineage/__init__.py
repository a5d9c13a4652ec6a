"""Lineage: which inputs, recipe and toolchain produced each sha256 (SQLAlchemy 2, Alembic)."""
