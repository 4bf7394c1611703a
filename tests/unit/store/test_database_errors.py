"""Telling an unreachable database from a bug, and keeping passwords out of messages."""

from __future__ import annotations

import asyncpg  # type: ignore[import-untyped]

from skiff.store import safe_url, unavailable


def test_lost_connections_count_as_the_database_being_unreachable() -> None:
    assert unavailable(ConnectionRefusedError())
    assert unavailable(TimeoutError())
    assert unavailable(asyncpg.ConnectionDoesNotExistError("gone"))
    assert unavailable(asyncpg.CannotConnectNowError("starting up"))
    assert unavailable(asyncpg.InterfaceError("pool is closing"))


def test_errors_of_the_statement_itself_are_bugs_not_outages() -> None:
    assert not unavailable(ValueError("bad"))
    assert not unavailable(asyncpg.UniqueViolationError("duplicate"))
    assert not unavailable(KeyError("x"))


def test_a_password_in_a_database_url_is_masked() -> None:
    assert (
        safe_url("postgresql://skiff:s3cret@db:5432/skiff")
        == "postgresql://skiff:***@db:5432/skiff"
    )
    assert safe_url("postgresql://skiff@db/skiff") == "postgresql://skiff@db/skiff"
    assert safe_url("sqlite:///data/skiff.db") == "sqlite:///data/skiff.db"
