"""Which database a ``SKIFF_DATABASE_URL`` names: the one place that reads its prefix.

The store (``open_store``), the cluster (``app.open_cluster``), the server locks
(``cli._claim``) and ``Settings.sqlite_path`` all ask here, so a new spelling of a URL, or a
new backend, is added once. It imports nothing of the project, so ``config.py`` may use it.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


class Backend(Enum):
    SQLITE = "sqlite"
    POSTGRES = "postgres"


def backend_of(database_url: str | None) -> Backend:
    """SQLite for no URL (the embedded default) or ``sqlite:///path``; PostgreSQL for
    ``postgresql://`` or ``postgres://``; anything else (an empty string included) is a
    ``ValueError`` that says what works."""
    if database_url is None or database_url.startswith(SQLITE_PREFIX):
        return Backend.SQLITE
    if database_url.startswith(POSTGRES_PREFIXES):
        return Backend.POSTGRES
    raise ValueError(
        f"unsupported database URL {database_url!r}: use sqlite:///path or postgresql://..."
    )


def sqlite_file_of(database_url: str | None) -> Path | None:
    """The file a ``sqlite:///path`` URL names; None for no URL or any other URL (the caller
    picks the default file, and an unsupported URL is refused where the store is opened)."""
    if database_url is not None and database_url.startswith(SQLITE_PREFIX):
        return Path(database_url.removeprefix(SQLITE_PREFIX))
    return None
