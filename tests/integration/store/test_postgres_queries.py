"""Every PostgreSQL named query prepares on the migrated schema: a typo or a parameter whose
type PostgreSQL cannot tell fails here, not at the first call of a path the contract tests
miss."""

from __future__ import annotations

import asyncpg  # type: ignore[import-untyped]

from pgtest import PG_DSN, fresh_schema
from skiff.store.named_queries import Dialect, compile_query, load
from skiff.store.postgres import PostgresStore
from skiff.store.rows import WORKER_FIELDS, worker_update_sql


async def test_every_postgres_query_prepares_on_the_migrated_schema() -> None:
    queries = dict(load(Dialect.POSTGRES))
    queries["update_worker"] = compile_query(
        "update_worker", worker_update_sql(sorted(WORKER_FIELDS)), Dialect.POSTGRES
    )
    async with fresh_schema() as schema:
        store = PostgresStore(PG_DSN, schema=schema)
        await store.open()
        await store.close()
        conn = await asyncpg.connect(PG_DSN, server_settings={"search_path": f'"{schema}"'})
        try:
            for name, query in queries.items():
                try:
                    await conn.prepare(query.sql)
                except asyncpg.PostgresError as exc:
                    raise AssertionError(f"query {name!r}: {exc}") from exc
        finally:
            await conn.close()
