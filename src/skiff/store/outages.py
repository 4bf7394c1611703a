"""Telling a database that cannot be reached from a bug, for either backend."""

from __future__ import annotations


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
