"""Telling a database that cannot be reached, or whose disk is full, from a bug, for either
backend."""

from __future__ import annotations

import errno
import sqlite3


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


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` means the database's disk has no room left (the write was not made:
    worth a 507 and a retry once space is freed), for either backend."""
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    try:
        import asyncpg
    except ImportError:  # pragma: no cover - asyncpg is a dependency
        return False
    # Class 53100: the server could not extend a file (its disk is full).
    return isinstance(exc, asyncpg.exceptions.DiskFullError)
