"""Alembic environment: metadata from prmkit.labeling.models; the connection is passed in
by prmkit.labeling.db.migrate (or built from sqlalchemy.url for the alembic command)."""

from alembic import context

from prmkit.labeling.db import make_engine
from prmkit.labeling.models import Base

config = context.config


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=Base.metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif (conn := config.attributes.get("connection")) is not None:
    _run(conn)
else:
    with make_engine(config.get_main_option("sqlalchemy.url")).begin() as conn:
        _run(conn)
