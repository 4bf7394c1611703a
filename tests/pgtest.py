"""The test PostgreSQL, shared by every suite that needs one: where it is, how a test gets a
fresh schema in it, and the one message that says how to enable the tests when it is missing."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

PG_DSN = os.environ.get("SKIFF_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
PG_UNREACHABLE = (
    "PostgreSQL not reachable at 127.0.0.1:5432; start it (see docs/testing.md)"
    " or set SKIFF_TEST_DATABASE_URL"
)


async def pg_admin() -> Any:
    """A connection to the test database; skips the test when there is none."""
    try:
        return await asyncpg.connect(PG_DSN, timeout=5)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
        pytest.skip(PG_UNREACHABLE)


def schema_name() -> str:
    return f"t_{secrets.token_hex(8)}"


@asynccontextmanager
async def fresh_schema() -> AsyncIterator[str]:
    """A fresh schema name, dropped (with everything in it) afterwards."""
    admin = await pg_admin()
    name = schema_name()
    try:
        yield name
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await admin.close()


@contextmanager
def fresh_schema_sync() -> Iterator[str]:
    """``fresh_schema`` for synchronous tests (the end-to-end suite)."""

    async def reachable() -> None:
        await (await pg_admin()).close()

    asyncio.run(reachable())
    name = schema_name()
    try:
        yield name
    finally:

        async def drop() -> None:
            admin = await pg_admin()
            try:
                await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
            finally:
                await admin.close()

        asyncio.run(drop())
