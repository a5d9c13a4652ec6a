"""Alembic environment: the URL comes from the config (set by farm.lineage.db) or from settings."""

from alembic import context

from farm.lineage.models import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")
if not url:
    from farm.settings import get_settings

    url = get_settings().resolved_database_url

target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    # The farm's engine: it creates a SQLite database's folder (a fresh FARM_HOME) and retries
    # transient connection failures.
    from farm.lineage.db import make_engine

    engine = make_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
