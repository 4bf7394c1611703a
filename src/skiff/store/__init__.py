"""Persistence: one ``Store`` protocol and its adapters, chosen by the database URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from skiff.store.base import Store


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database cannot be reached right now (worth a 503 and a
    retry), as opposed to a bug."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    try:
        import asyncpg  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - asyncpg is a dependency
        return False
    return isinstance(
        exc,
        (
            asyncpg.PostgresConnectionError,
            asyncpg.InterfaceError,
            asyncpg.CannotConnectNowError,
            asyncpg.exceptions.AdminShutdownError,
        ),
    )


def safe_url(database_url: str) -> str:
    """The URL with any password replaced, fit for logs and messages."""
    parts = urlsplit(database_url)
    if parts.password is None:
        return database_url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


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
