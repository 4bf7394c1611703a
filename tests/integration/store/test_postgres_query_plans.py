"""PostgreSQL's side of ``test_sqlite_query_plans.py``: no query reads a table that grows
with the jobs whole, except where reading every row is its purpose.

PostgreSQL plans by the table's statistics, so the tables are filled first (jobs of many
endpoints, workers and users in every state, their stream chunks and webhook deliveries) and
analysed, and each query is planned for given values (a custom plan): every parameter given
one that few rows hold (a job, a worker, the moment now), as a busy server's queries mostly
are. Whole reads are priced out (``enable_seqscan = off``), so one the planner still picks, or
an index it reads end to end, is one no index of the migrated schema spares; so is a read
planned to cover more than a hundredth of a table. PostgreSQL runs a prepared statement with a
plan for any values (a generic plan) only once that plan is priced no higher than those for the
values given, so these are the plans that run while they are cheap."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from pgtest import PG_DSN, fresh_schema_sync
from query_plans import BUSY_QUERIES, GROWS_WITH_JOBS, WHOLE_BY_DESIGN
from skiff.store.named_queries import Dialect
from skiff.store.named_queries import load as load_queries
from skiff.store.postgres import PostgresStore

#: Rows FILL puts in each table that grows with the jobs.
FILLED_ROWS = 40_000
#: Steps that read a table, or one of its indexes, row by row.
SCANS = ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Index Scan")
#: A value few rows hold, by the parameter's type.
RARE_VALUES: dict[str, object] = {
    "text": "x",
    "text[]": ["x"],
    "bytea": b"x",
    "int4": 1,
    "int8": 1,
    "float8": 1.0,
    "bool": False,
}
#: 40,000 jobs of 50 endpoints and 10 users: a twentieth queued, a twentieth running on 400
#: workers with leases and deadlines, the rest ended; submitted one a second from second 1.
FILL = """
INSERT INTO jobs (id, endpoint_id, status, input, execution_timeout_ms, ttl_ms, submitted_at,
    worker_id, lease_until, run_deadline, expires_at, retain_until, caller_id, owner_id,
    submitter_id, s3_config)
SELECT 'j' || g, 'e' || (g % 50),
    CASE g % 20 WHEN 0 THEN 'IN_QUEUE' WHEN 1 THEN 'IN_PROGRESS' WHEN 2 THEN 'FAILED'
        ELSE 'COMPLETED' END,
    '{}', 600000, 86400000, g,
    CASE WHEN g % 20 = 1 OR g % 200 = 0 THEN 'w' || (g % 400) END,
    CASE WHEN g % 20 IN (0, 1) THEN g + 100 END,
    CASE WHEN g % 20 = 1 THEN g + 600 END,
    g + 86400, CASE WHEN g % 20 > 1 THEN g + 1800 END,
    CASE WHEN g % 7 = 0 THEN 'c' || (g % 30) END, 'u' || (g % 10), 'u' || (g % 10),
    CASE WHEN g % 1000 = 0 THEN 'sealed' END
FROM generate_series(1, 40000) g;
INSERT INTO stream_chunks (job_id, seq, output)
SELECT 'j' || (g / 4), g % 4, '{}' FROM generate_series(1, 40000) g;
INSERT INTO webhook_deliveries (id, job_id, endpoint_id, user_id, url, payload, status,
    attempts, next_attempt_at, created_at, finished_at, written_bytes)
SELECT 'd' || g, 'j' || g, 'e' || (g % 50), 'u' || (g % 10), 'https://example.com/hook', '{}',
    CASE WHEN g % 20 = 0 THEN 'pending' ELSE 'delivered' END, 1, g, g,
    CASE WHEN g % 20 <> 0 THEN g + 1 END, 0
FROM generate_series(1, 40000) g;
ANALYZE;
"""


@pytest.fixture(scope="module")
def schema() -> Iterator[str]:
    """A migrated schema with the tables filled, shared by the module's tests (read only)."""
    with fresh_schema_sync() as name:

        async def fill() -> None:
            store = PostgresStore(PG_DSN, schema=name)
            await store.open()
            await store.close()
            conn = await asyncpg.connect(PG_DSN, server_settings={"search_path": f'"{name}"'})
            try:
                await conn.execute(FILL)
            finally:
                await conn.close()

        asyncio.run(fill())
        yield name


@pytest.fixture
async def conn(schema: str) -> AsyncIterator[Any]:
    settings = {"search_path": f'"{schema}"', "enable_seqscan": "off"}
    connection = await asyncpg.connect(PG_DSN, server_settings=settings)
    try:
        yield connection
    finally:
        await connection.close()


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


async def plan(conn: Any, sql: str) -> list[dict[str, Any]]:
    """Every step of ``sql``'s plan for rare values of its parameters (nothing runs)."""
    statement = await conn.prepare("EXPLAIN (FORMAT JSON) " + sql)
    types = [param.name for param in statement.get_parameters()]
    unknown = set(types) - RARE_VALUES.keys()
    assert not unknown, f"give RARE_VALUES a value of {unknown} for: {sql}"
    values = [RARE_VALUES[name] for name in types]
    [top] = json.loads(await statement.fetchval(*values))
    return list(_nodes(top["Plan"]))


def whole_reads(steps: list[dict[str, Any]]) -> list[str]:
    """The job tables read whole: a step over one with no condition on an index's key (an
    index read end to end is the table's rows read all the same, as SQLite's ``SCAN ... USING
    INDEX`` is), or one planned to read more than a hundredth of its rows."""
    return [
        f"{step['Node Type']} on {step['Relation Name']}"
        for step in steps
        if step["Node Type"] in SCANS
        and step.get("Relation Name") in GROWS_WITH_JOBS
        and ("Index Cond" not in step or step["Plan Rows"] > FILLED_ROWS // 100)
    ]


async def test_no_query_reads_a_table_of_jobs_whole(conn: Any) -> None:
    found = {}
    for name, query in load_queries(Dialect.POSTGRES).items():
        if name in WHOLE_BY_DESIGN:
            continue
        scans = whole_reads(await plan(conn, query.sql))
        if scans:
            found[name] = scans
    assert found == {}


async def test_the_checker_sees_a_whole_read(conn: Any) -> None:
    steps = await plan(conn, "SELECT id FROM jobs WHERE input = $1")
    assert whole_reads(steps) == ["Seq Scan on jobs"]


async def test_the_checker_sees_an_index_read_of_most_of_a_table(conn: Any) -> None:
    steps = await plan(conn, "SELECT id FROM jobs WHERE expires_at > $1")
    assert whole_reads(steps) != []


async def test_the_checker_sees_an_index_read_end_to_end(conn: Any) -> None:
    steps = await plan(conn, "SELECT id FROM jobs WHERE input = $1 ORDER BY seq LIMIT 10")
    assert whole_reads(steps) == ["Index Scan on jobs"]


@pytest.mark.parametrize(("query", "index"), BUSY_QUERIES)
async def test_the_busy_queries_read_their_own_index(conn: Any, query: str, index: str) -> None:
    steps = await plan(conn, load_queries(Dialect.POSTGRES)[query].sql)
    assert index in {step.get("Index Name") for step in steps}, steps
