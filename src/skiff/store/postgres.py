"""The shared backend: PostgreSQL through an asyncpg connection pool, under the operations of
``operations.SqlStore``.

Every state change is one conditional statement guarded by the states a job may move from;
operations that take several statements run in one transaction, on a connection of the pool;
one statement runs on the pool with no transaction around it. Claims lock their rows with
``FOR UPDATE SKIP LOCKED`` so replicas claiming at once never wait on, nor hand out, the same
job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

from skiff.store.migration_scripts import migrations
from skiff.store.named_queries import Dialect, Query
from skiff.store.named_queries import load as load_queries
from skiff.store.operations import Connection, Op, SqlStore
from skiff.store.rows import RowReader
from skiff.store.sealing import KeySource, OneTimeKey

T = TypeVar("T")

#: The advisory lock key that serialises migrations (and schema creation) between replicas.
_MIGRATION_LOCK = 0x736B696666  # "skiff"


#: Migrations with an earlier name: the PostgreSQL set was numbered on its own (0001..0003)
#: until it took the SQLite set's numbers, so one number names one change of the model on both.
#: Both names are recorded, whichever version applied it: a replica of the version before,
#: sharing the database during a rolling upgrade or after a rollback, finds its own names and
#: does not apply them again.
EARLIER_NAMES = {
    "0004_replicas.sql": "0002_replicas.sql",
    "0005_job_counts.sql": "0003_job_counts.sql",
}


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def migrate(conn: Any, schema: str | None = None) -> list[str]:
    """Apply the migrations not applied yet, in one transaction under an advisory lock;
    returns their names."""
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        if schema is not None:
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(schema)}")
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations"
            " (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION)"
        )
        record = "INSERT INTO schema_migrations VALUES ($1, extract(epoch FROM now()))"
        done = {r[0] for r in await conn.fetch("SELECT name FROM schema_migrations")}
        for name, earlier in EARLIER_NAMES.items():
            # Applied under one name: record the other too.
            for missing, present in ((name, earlier), (earlier, name)):
                if present in done and missing not in done:
                    await conn.execute(record, missing)
                    done.add(missing)
        for name, script in migrations(Dialect.POSTGRES):
            if name in done:
                continue
            await conn.execute(script)
            await conn.execute(record, name)
            if name in EARLIER_NAMES:
                await conn.execute(record, EARLIER_NAMES[name])
            applied.append(name)
    return applied


_QUERIES = load_queries(Dialect.POSTGRES)


def _touched(status: str) -> int:
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class _PostgresConnection:
    """``operations.Connection`` over an asyncpg connection or pool (a Record is read by
    column name)."""

    __slots__ = ("conn",)

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def execute(self, query: str | Query, /, **values: object) -> int:
        q = _QUERIES[query] if isinstance(query, str) else query
        return _touched(await self.conn.execute(q.sql, *q.args(values)))

    async def execute_many(self, query: str, values: list[Mapping[str, object]]) -> None:
        if values:
            q = _QUERIES[query]
            await self.conn.executemany(q.sql, [q.args(v) for v in values])

    async def fetch(self, query: str | Query, /, **values: object) -> list[Any]:
        q = _QUERIES[query] if isinstance(query, str) else query
        rows: list[Any] = await self.conn.fetch(q.sql, *q.args(values))
        return rows

    async def fetchrow(self, query: str | Query, /, **values: object) -> Any:
        q = _QUERIES[query] if isinstance(query, str) else query
        return await self.conn.fetchrow(q.sql, *q.args(values))

    async def read(self, query: str | Query, make: RowReader[T], /, **values: object) -> list[T]:
        return [make(r) for r in await self.fetch(query, **values)]

    async def read_one(
        self, query: str | Query, make: RowReader[T], /, **values: object
    ) -> T | None:
        row = await self.fetchrow(query, **values)
        return make(row) if row else None

    def ids(self, ids: list[str] | None) -> object:
        """A text[] as it is."""
        return ids


#: The let-go's two statements of PostgreSQL's own (SQLite's one writer needs neither): the
#: worker's row locked, then its signals forgotten and the worker idled in one statement.
_LOCK_WORKER = "SELECT state FROM workers WHERE id = $1 FOR NO KEY UPDATE"
_FORGET_AND_IDLE = (
    "WITH forgotten AS (DELETE FROM stop_signals WHERE worker_id = $1"
    " AND ($2::text[] IS NULL OR job_id = ANY($2::text[])))"
    " UPDATE workers SET state = 'idle', idle_since = $3"
    " WHERE id = $1 AND state = 'running' AND NOT EXISTS"
    " (SELECT 1 FROM jobs WHERE worker_id = $1 AND status = 'IN_PROGRESS')"
)


class PostgresStore(SqlStore):
    dialect = Dialect.POSTGRES
    unique_violation = asyncpg.UniqueViolationError
    serialization_failure = asyncpg.SerializationError
    # The claim's statement skips a worker that may not claim and marks it running.
    _claims_in_one_statement = True

    def __init__(
        self,
        dsn: str,
        schema: str | None = None,
        *,
        min_size: int = 1,
        max_size: int = 10,
        keys: KeySource | None = None,
    ) -> None:
        self._dsn = dsn
        self._keys = keys if keys is not None else OneTimeKey()
        self._schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._pool: Any = None
        self._on_pool: _PostgresConnection | None = None

    # -- lifecycle ----------------------------------------------------------------------
    async def _connect(self) -> list[str]:
        settings = {"search_path": _quote_ident(self._schema)} if self._schema else None
        pool = await asyncpg.create_pool(
            self._dsn,
            min_size=self._min_size,
            max_size=self._max_size,
            server_settings=settings,
        )
        try:
            async with pool.acquire() as conn:
                applied = await migrate(conn, self._schema)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool
        self._on_pool = _PostgresConnection(pool)
        return applied

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
            self._on_pool = None

    @property
    def pool(self) -> Any:
        assert self._pool is not None, "store is not open"
        return self._pool

    # -- how operations run ---------------------------------------------------------------
    def _reader(self) -> Connection:
        """The pool: each statement on whichever connection is free."""
        assert self._on_pool is not None, "store is not open"
        return self._on_pool

    async def _write(self, op: Op[T], *, snapshot: bool = False) -> T:
        isolation = "repeatable_read" if snapshot else None
        async with self.pool.acquire() as conn, conn.transaction(isolation=isolation):
            return await op(_PostgresConnection(conn))

    async def _write_one(self, op: Op[T]) -> T:
        return await op(self._reader())

    async def _let_go(
        self, c: Connection, worker_id: str, job_ids: list[str] | None, now: float
    ) -> None:
        """Under READ COMMITTED two transactions each letting go of one of a worker's last two
        jobs would each still see the other's job in progress, so neither would idle the
        worker. So the worker's row is locked first, in a statement of its own: the next
        statement takes a fresh snapshot once the lock is held, and sees every job change of
        the transactions that held the lock before (other releases, and claims, which lock the
        row too). Locks are taken in the order jobs, workers, stop signals (as
        ``delete_worker``), so this cannot deadlock."""
        assert isinstance(c, _PostgresConnection)
        state = await c.conn.fetchval(_LOCK_WORKER, worker_id)
        if state != "running":
            if job_ids is None or job_ids:
                await c.execute("forget_stop_signals", worker_id=worker_id, job_ids=job_ids)
            return
        # One statement for both, so the lock costs no round trip over the two statements before.
        await c.conn.execute(_FORGET_AND_IDLE, worker_id, job_ids, now)
