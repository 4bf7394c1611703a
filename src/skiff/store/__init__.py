"""Persistence: one ``Store`` protocol and its adapters, chosen by the database URL."""

from __future__ import annotations

from pathlib import Path

from skiff.store.base import Store


def open_store(database_url: str | None, sqlite_path: Path, schema: str | None = None) -> Store:
    """SQLite (the embedded default, or ``sqlite:///path``) or PostgreSQL
    (``postgresql://...``); anything else is refused with a message that says what works."""
    if database_url is None or database_url.startswith("sqlite:///"):
        from skiff.store.sqlite import SQLiteStore

        return SQLiteStore(sqlite_path)
    if database_url.startswith(("postgresql://", "postgres://")):
        from skiff.store.postgres import PostgresStore

        return PostgresStore(database_url, schema=schema)
    raise ValueError(
        f"unsupported database URL {database_url!r}: use sqlite:///path or postgresql://..."
    )
