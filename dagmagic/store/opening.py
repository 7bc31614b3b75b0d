"""Which backend a store location opens: a SQLite file for a path, PostgreSQL for a ``postgresql://`` URL."""

from __future__ import annotations

import importlib.util

from dagmagic.errors import ConfigurationError
from dagmagic.store.backend import Backend, Location
from dagmagic.store.sqlite import SQLiteBackend
from dagmagic.store_url import StoreURL

__all__ = ["open_backend"]


def open_backend(location: Location) -> Backend:
    """The backend for ``location``; a PostgreSQL URL needs psycopg (the ``postgres`` extra)."""
    if isinstance(location, StoreURL):
        if importlib.util.find_spec("psycopg") is None:
            raise ConfigurationError(
                f"DAG_STORE is a PostgreSQL URL ({location}), but psycopg, its driver, is not installed: "
                'pip install "dagmagic[postgres]" (or set DAG_STORE to a file path, for a SQLite store).'
            )
        from dagmagic.store import postgres

        return postgres.PostgresBackend(location)
    return SQLiteBackend(location)
