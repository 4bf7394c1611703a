"""No query reads a table that grows with the jobs whole, except where reading every row is
its purpose: such a read runs on the event loop's thread (or holds the one writer), so it costs
every tenant's requests time in proportion to all jobs kept. Checked with SQLite's own planner
(``EXPLAIN QUERY PLAN``) on a freshly migrated file, for every named query."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from query_plans import BUSY_QUERIES, GROWS_WITH_JOBS, WHOLE_BY_DESIGN
from skiff.store.named_queries import Dialect
from skiff.store.named_queries import load as load_queries
from skiff.store.sqlite import _connect, migrate


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    path = Path(tmp_path_factory.mktemp("plans")) / "skiff.db"
    connection = _connect(path)
    migrate(connection)
    return connection


def plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, [None] * sql.count("?")).fetchall()
    return [row[3] for row in rows]


def whole_reads(steps: list[str]) -> list[str]:
    return [
        step
        for step in steps
        for table in GROWS_WITH_JOBS
        if step == f"SCAN {table}" or step.startswith(f"SCAN {table} ")
    ]


def test_no_query_reads_a_table_of_jobs_whole(conn: sqlite3.Connection) -> None:
    found = {}
    for name, query in load_queries(Dialect.SQLITE).items():
        if name in WHOLE_BY_DESIGN:
            continue
        scans = whole_reads(plan(conn, query.sql))
        if scans:
            found[name] = scans
    assert found == {}


def test_the_checker_sees_a_whole_read(conn: sqlite3.Connection) -> None:
    steps = plan(conn, "SELECT id FROM jobs WHERE worker_id = ? AND status IN ('A', 'B')")
    assert whole_reads(steps) != []


@pytest.mark.parametrize(("query", "index"), BUSY_QUERIES)
def test_the_busy_queries_read_their_own_index(
    conn: sqlite3.Connection, query: str, index: str
) -> None:
    steps = plan(conn, load_queries(Dialect.SQLITE)[query].sql)
    assert any(f"USING INDEX {index} " in step for step in steps), steps
