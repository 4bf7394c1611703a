"""Persistence: one ``Store`` protocol, its operations written once (``operations.py``) and
two adapters under them, chosen by the database URL."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from skiff.databases import Backend, backend_of
from skiff.store.base import Store
from skiff.store.outages import disk_full as disk_full
from skiff.store.outages import unavailable as unavailable
from skiff.store.sealing import KeySource

if TYPE_CHECKING:
    # Only named: ``config`` imports ``sealing`` from this package.
    from skiff.config import Settings


def safe_url(database_url: str) -> str:
    """The URL with any password replaced, fit for logs and messages."""
    parts = urlsplit(database_url)
    if parts.password is None:
        return database_url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_store(
    database_url: str | None,
    sqlite_path: Path,
    schema: str | None = None,
    keys: KeySource | None = None,
) -> Store:
    """SQLite (the embedded default, or ``sqlite:///path``) or PostgreSQL
    (``postgresql://...``); anything else is refused with a message that says what works.
    ``keys``: where the key of its sealed values comes from (a key made for this store object
    alone when None: for throwaway stores only)."""
    if backend_of(database_url) is Backend.SQLITE:
        from skiff.store.sqlite import SQLiteStore

        return SQLiteStore(sqlite_path, keys)
    from skiff.store.postgres import PostgresStore

    assert database_url is not None  # backend_of reads no URL as SQLite
    return PostgresStore(database_url, schema=schema, keys=keys)


def open_configured(settings: Settings) -> Store:
    """The store ``settings`` name: the server's, and the command line's."""
    return open_store(
        settings.database_url,
        settings.sqlite_path(),
        settings.database_schema,
        settings.key_source(),
    )
