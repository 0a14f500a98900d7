"""Alembic's environment: migrations run on the connection `proctor.db.connect.migrate` passes in, or, from the
`alembic` command line, on `sqlalchemy.url` / PROCTOR_DATABASE_URL."""

from __future__ import annotations

from alembic import context

from proctor.db.models import VERSION_TABLE, Base

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
        compare_type=True,
        version_table=VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
elif context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    from proctor.db.connect import create_db_engine, database_url

    url = config.get_main_option("sqlalchemy.url") or database_url()
    engine = create_db_engine(url)
    with engine.connect() as own:
        _run(own)
        own.commit()
    engine.dispose()
