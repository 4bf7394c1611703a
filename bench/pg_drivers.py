"""Which PostgreSQL driver: asyncpg or psycopg 3 (async), measured on skiff's own statements.

Two figures per driver, alternating three times so neither always runs first:

* the driver's own cost: wall time and client CPU (``time.process_time``) per statement, one
  connection, one small parameterised query after another;
* a job cycle as skiff runs it (insert a job, claim it with ``FOR UPDATE SKIP LOCKED``, finish
  it), 16 concurrent tasks on a pool of 10 connections, in a throwaway schema.

psycopg is not one of skiff's dependencies; install it beside the lock to run this:
``.venv/bin/pip install 'psycopg[binary,pool]' && .venv/bin/python bench/pg_drivers.py``.
The database is ``SKIFF_TEST_DATABASE_URL`` (default: the local ``test`` database).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import psycopg  # type: ignore[import-not-found]
import psycopg_pool  # type: ignore[import-not-found]

DSN = os.environ.get("SKIFF_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "bench_" + secrets.token_hex(4)
STATEMENTS, CYCLES, CONCURRENCY = 5000, 3000, 16

PROBE = "SELECT $1::text AS id, $2::int AS n, now() AS at"
INSERT = (
    f"INSERT INTO {SCHEMA}.jobs (id, endpoint_id, status, input) VALUES ($1, 'ep', 'IN_QUEUE', $2)"
)
CLAIM = (
    f"UPDATE {SCHEMA}.jobs SET status = 'IN_PROGRESS', worker_id = $1 WHERE seq IN"
    f" (SELECT seq FROM {SCHEMA}.jobs WHERE endpoint_id = 'ep' AND status = 'IN_QUEUE'"
    f" ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
)
FINISH = f"UPDATE {SCHEMA}.jobs SET status = 'COMPLETED', output = $1 WHERE id = $2"


def pyformat(sql: str) -> str:
    return sql.replace("$1", "%s").replace("$2", "%s")


async def statement_cost_asyncpg() -> tuple[float, float]:
    conn = await asyncpg.connect(DSN)
    try:
        return await _per_statement(lambda i: conn.fetchrow(PROBE, "x", i))
    finally:
        await conn.close()


async def statement_cost_psycopg() -> tuple[float, float]:
    conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
    sql = pyformat(PROBE)

    async def one(i: int) -> Any:
        return await (await conn.execute(sql, ("x", i))).fetchone()

    try:
        return await _per_statement(one)
    finally:
        await conn.close()


async def _per_statement(one: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    for i in range(200):  # warm: prepared statements, caches
        await one(i)
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(STATEMENTS):
        await one(i)
    return (
        (time.perf_counter() - wall) / STATEMENTS * 1e6,
        (time.process_time() - cpu) / STATEMENTS * 1e6,
    )


async def cycles_asyncpg(tag: str) -> tuple[float, float, float]:
    pool = await asyncpg.create_pool(DSN, min_size=10, max_size=10)

    async def one(i: int) -> None:
        await pool.execute(INSERT, f"{tag}{i}", '{"x": 1}')
        row = None
        while row is None:  # SKIP LOCKED may pass over a job another task is claiming
            row = await pool.fetchrow(CLAIM, "w")
        await pool.execute(FINISH, '"ok"', row[0])

    try:
        return await _cycles(one)
    finally:
        await pool.close()


async def cycles_psycopg(tag: str) -> tuple[float, float, float]:
    pool = psycopg_pool.AsyncConnectionPool(
        DSN, min_size=10, max_size=10, kwargs={"autocommit": True}, open=False
    )
    await pool.open()
    insert, claim, finish = pyformat(INSERT), pyformat(CLAIM), pyformat(FINISH)

    async def one(i: int) -> None:
        async with pool.connection() as c:
            await c.execute(insert, (f"{tag}{i}", '{"x": 1}'))
        row = None
        while row is None:
            async with pool.connection() as c:
                row = await (await c.execute(claim, ("w",))).fetchone()
        async with pool.connection() as c:
            await c.execute(finish, ('"ok"', row[0]))

    try:
        return await _cycles(one)
    finally:
        await pool.close()


async def _cycles(one: Callable[[int], Awaitable[None]]) -> tuple[float, float, float]:
    gate = asyncio.Semaphore(CONCURRENCY)
    latencies: list[float] = []

    async def task(i: int) -> None:
        async with gate:
            start = time.perf_counter()
            await one(i)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(task(i) for i in range(CYCLES)))
    wall = time.perf_counter() - start
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)]
    return CYCLES / wall, statistics.median(latencies) * 1000, p99 * 1000


async def admin(sql: str) -> None:
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main() -> None:
    await admin(
        f"CREATE SCHEMA {SCHEMA};"
        f" CREATE TABLE {SCHEMA}.jobs (seq BIGSERIAL PRIMARY KEY, id TEXT UNIQUE NOT NULL,"
        f" endpoint_id TEXT NOT NULL, status TEXT NOT NULL, input TEXT NOT NULL,"
        f" worker_id TEXT, output TEXT);"
        f" CREATE INDEX ON {SCHEMA}.jobs (endpoint_id, seq) WHERE status = 'IN_QUEUE';"
    )
    try:
        for round_no in range(3):
            for name, cost, cycles in (
                ("asyncpg", statement_cost_asyncpg, cycles_asyncpg),
                ("psycopg 3", statement_cost_psycopg, cycles_psycopg),
            ):
                await admin(f"TRUNCATE {SCHEMA}.jobs")
                wall, cpu = await cost()
                rate, p50, p99 = await cycles(f"{name[0]}{round_no}-")
                print(
                    f"{name:10s} {wall:6.1f} us/statement ({cpu:5.1f} us client CPU)"
                    f" | {rate:6.0f} job cycles/s, p50 {p50:5.2f} ms, p99 {p99:5.2f} ms"
                )
    finally:
        await admin(f"DROP SCHEMA {SCHEMA} CASCADE")


if __name__ == "__main__":
    asyncio.run(main())
