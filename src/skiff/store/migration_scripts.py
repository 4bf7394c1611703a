"""The schema migrations of each dialect, in the order they apply.

A migration both databases run alike is written once, in ``migrations/shared/``, with
PostgreSQL's type names; SQLite gets the names it declares the same columns with
(``_SQLITE_SPELLING``), so its schema reads as if the file had been written for it. One whose
SQL really differs (a trigger, a generated key, a binary column) is written once per dialect,
in ``migrations/sqlite/`` and ``migrations/postgres/``, under the same file name. The adapters
record what they applied by file name, so a file keeps its name for ever, whichever folder
holds it.

Mistakes are refused when the migrations are read (before any is applied): a name both shared
and a dialect's own, or a shared file holding SQL that SQLite would read otherwise.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable

from skiff.store.named_queries import Dialect

#: A shared migration's PostgreSQL type names as SQLite declares the same columns: SQLite keeps
#: a double as REAL and a boolean as INTEGER 0/1.
_SQLITE_SPELLING = (
    (re.compile(r"\bDOUBLE PRECISION\b", re.IGNORECASE), "REAL"),
    (re.compile(r"\bBOOLEAN\b", re.IGNORECASE), "INTEGER"),
    (re.compile(r"\bDEFAULT FALSE\b", re.IGNORECASE), "DEFAULT 0"),
    (re.compile(r"\bDEFAULT TRUE\b", re.IGNORECASE), "DEFAULT 1"),
)
#: What a shared migration may not hold, outside its comments: a type that means something else
#: on the other database (SQLite's REAL is PostgreSQL's single precision), a spelling of one
#: dialect only, or a function body. Such a migration is written per dialect.
_PER_DIALECT = re.compile(
    r"\b(?:REAL|BLOB|BYTEA|BIGINT|SERIAL|BIGSERIAL|AUTOINCREMENT|plpgsql)\b|\$\$", re.IGNORECASE
)
_COMMENT = re.compile(r"--[^\n]*")


class MigrationError(ValueError):
    """The migration files are not as this module requires."""


def migrations(dialect: Dialect, folder: Traversable | None = None) -> list[tuple[str, str]]:
    """Every migration of ``dialect`` as (file name, SQL), sorted by name: its own folder's and
    the shared ones (of ``folder``; the package's ``migrations`` by default)."""
    if folder is None:
        folder = resources.files("skiff.store").joinpath("migrations")
    own = _read(folder.joinpath(dialect.value))
    shared = _read(folder.joinpath("shared"))
    both = sorted(own.keys() & shared.keys())
    if both:
        raise MigrationError(f"{both} written both shared and for {dialect.value}")
    for name, sql in shared.items():
        found = _PER_DIALECT.search(_COMMENT.sub("", sql))
        if found is not None:
            raise MigrationError(
                f"shared migration {name} holds {found.group(0)!r}: write it per dialect"
            )
        if dialect is Dialect.SQLITE:
            for pattern, spelling in _SQLITE_SPELLING:
                sql = pattern.sub(spelling, sql)
        own[name] = sql
    return sorted(own.items())


def _read(folder: Traversable) -> dict[str, str]:
    return {e.name: e.read_text() for e in folder.iterdir() if e.name.endswith(".sql")}
