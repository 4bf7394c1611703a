"""The shared backend: PostgreSQL through an asyncpg connection pool.

Same semantics as ``SQLiteStore``: every state change is one conditional statement guarded by
the states a job may move from; operations that take several statements run in one
transaction. Claims lock their rows with ``FOR UPDATE SKIP LOCKED`` so replicas claiming at
once never wait on, nor hand out, the same job.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus, sources_of
from skiff.domain.templates import Template
from skiff.domain.webhooks import new_webhook_secret
from skiff.domain.workers import Worker
from skiff.errors import Conflict
from skiff.store.base import (
    ApiKey,
    JobCounts,
    RegistryAuthRecord,
    StreamChunk,
    User,
    WebhookDelivery,
)
from skiff.store.named_queries import Dialect
from skiff.store.named_queries import load as load_queries
from skiff.store.rows import (
    FOLD_JOB_COUNTS_SQL,
    JOB_COLUMNS,
    JOB_COUNTS_SQL,
    WORKER_COLUMNS,
    WORKER_FIELDS,
    api_key_from_row,
    api_key_params,
    endpoint_from_row,
    job_counts_from,
    job_from_row,
    registry_auth_from_row,
    registry_auth_params,
    sql_in,
    template_params,
    user_from_row,
    user_params,
    webhook_payload,
    worker_from_row,
    worker_params,
)

#: The advisory lock key that serialises migrations (and schema creation) between replicas.
_MIGRATION_LOCK = 0x736B696666  # "skiff"

#: ``retain_until`` of a job that just became final, given now as ``$1``.
_RETAIN = "$1::float8 + retention_ms / 1000.0::float8"


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
        done = {r[0] for r in await conn.fetch("SELECT name FROM schema_migrations")}
        folder = resources.files("skiff.store").joinpath("migrations/postgres")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".sql") or entry.name in done:
                continue
            await conn.execute(entry.read_text())
            await conn.execute(
                "INSERT INTO schema_migrations VALUES ($1, extract(epoch FROM now()))",
                entry.name,
            )
            applied.append(entry.name)
    return applied


async def _after_final(conn: Any, jobs: list[Job]) -> None:
    """In the transaction that made jobs final: store their webhook deliveries."""
    for job in jobs:
        if job.webhook is None or job.finished_at is None:
            continue
        user_id = await conn.fetchval(
            "SELECT user_id FROM endpoints WHERE id = $1", job.endpoint_id
        )
        if user_id is None:
            continue
        await conn.execute(
            "INSERT INTO webhook_deliveries (id, job_id, endpoint_id, user_id, url, payload,"
            " next_attempt_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            secrets.token_hex(12),
            job.id,
            job.endpoint_id,
            user_id,
            job.webhook,
            webhook_payload(job, job.finished_at),
            job.finished_at,
            job.finished_at,
        )


async def _signal_stop(
    conn: Any, jobs: list[tuple[str | None, str]], reason: str, now: float
) -> None:
    """Queue job-stop signals for (worker id, job id) pairs; the row may be gone by then."""
    pairs = [(worker, job_id, reason, now) for worker, job_id in jobs if worker is not None]
    if pairs:
        await conn.executemany(
            "INSERT INTO stop_signals (worker_id, job_id, reason, created_at)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            pairs,
        )


async def _let_go(conn: Any, worker_id: str, job_ids: list[str] | None, now: float) -> None:
    """The worker let go of these jobs (all, with None): their stop signals go, and a running
    worker holding no job any more is idle.

    Under READ COMMITTED two transactions each letting go of one of a worker's last two jobs
    would each still see the other's job in progress, so neither would idle the worker. So the
    worker's row is locked first, in a statement of its own: the next statement takes a fresh
    snapshot once the lock is held, and sees every job change of the transactions that held the
    lock before (other releases, and claims, which lock the row too). Locks are taken in the
    order jobs, workers, stop signals (as ``delete_worker``), so this cannot deadlock."""
    state = await conn.fetchval(
        "SELECT state FROM workers WHERE id = $1 FOR NO KEY UPDATE", worker_id
    )
    forget = (
        "DELETE FROM stop_signals WHERE worker_id = $1"
        " AND ($2::text[] IS NULL OR job_id = ANY($2::text[]))"
    )
    if state != "running":
        if job_ids is None or job_ids:
            await conn.execute(forget, worker_id, job_ids)
        return
    # One statement for both, so the lock costs no round trip over the two statements before.
    await conn.execute(
        f"WITH forgotten AS ({forget}) UPDATE workers SET state = 'idle', idle_since = $3"
        f" WHERE id = $1 AND state = 'running' AND NOT EXISTS"
        f" (SELECT 1 FROM jobs WHERE worker_id = $1 AND status = 'IN_PROGRESS')",
        worker_id,
        job_ids,
        now,
    )


_QUERIES = load_queries(Dialect.POSTGRES)


def _pg_value(value: object) -> object:
    return value.value if isinstance(value, enum.Enum) else value


class PostgresStore:
    def __init__(
        self, dsn: str, schema: str | None = None, *, min_size: int = 1, max_size: int = 10
    ) -> None:
        self._dsn = dsn
        self._schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._pool: Any = None

    # -- lifecycle ----------------------------------------------------------------------
    async def open(self) -> None:
        settings = {"search_path": _quote_ident(self._schema)} if self._schema else None
        pool = await asyncpg.create_pool(
            self._dsn,
            min_size=self._min_size,
            max_size=self._max_size,
            server_settings=settings,
        )
        try:
            async with pool.acquire() as conn:
                await migrate(conn, self._schema)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> Any:
        assert self._pool is not None, "store is not open"
        return self._pool

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        rows: list[Any] = await self.pool.fetch(sql, *args)
        return rows

    async def _fetchrow(self, sql: str, *args: Any) -> Any:
        return await self.pool.fetchrow(sql, *args)

    async def _execute(self, sql: str, *args: Any) -> int:
        """Run one statement; returns the number of rows it touched."""
        status: str = await self.pool.execute(sql, *args)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    # Named queries (``store/queries``); a Record is read by column name.
    async def _fetch_named(self, name: str, /, **values: object) -> list[Any]:
        query = _QUERIES[name]
        return await self._fetch(query.sql, *query.args(values))

    async def _fetchrow_named(self, name: str, /, **values: object) -> Any:
        query = _QUERIES[name]
        return await self._fetchrow(query.sql, *query.args(values))

    async def _execute_named(self, name: str, /, **values: object) -> int:
        query = _QUERIES[name]
        return await self._execute(query.sql, *query.args(values))

    # -- secrets --------------------------------------------------------------------------
    async def secret(self, name: str) -> bytes:
        await self._execute_named("add_secret", name=name, value=secrets.token_bytes(32))
        row = await self._fetchrow_named("get_secret", name=name)
        return bytes(row["value"])

    # -- users and keys -------------------------------------------------------------------
    async def create_user(self, user: User) -> User:
        try:
            await self._execute_named("create_user", **user_params(user))
        except asyncpg.UniqueViolationError:
            raise Conflict(f"a user named {user.name!r} already exists") from None
        return user

    async def get_user_by_name(self, name: str) -> User | None:
        row = await self._fetchrow_named("get_user_by_name", name=name)
        return user_from_row(row) if row else None

    async def add_api_key(self, key: ApiKey, key_hash: str) -> ApiKey:
        try:
            await self._execute_named("add_api_key", **api_key_params(key, key_hash))
        except asyncpg.UniqueViolationError:
            raise Conflict("this API key is already registered") from None
        return key

    async def find_api_key(self, key_hash: str) -> tuple[ApiKey, User] | None:
        row = await self._fetchrow_named("find_api_key", key_hash=key_hash)
        return api_key_from_row(row) if row else None

    async def list_api_keys(self) -> list[tuple[ApiKey, User]]:
        return [api_key_from_row(r) for r in await self._fetch_named("list_api_keys")]

    async def revoke_api_key(self, key_id: str, now: float) -> bool:
        return await self._execute_named("revoke_api_key", now=now, id=key_id) > 0

    # -- registry auths -------------------------------------------------------------------
    async def create_registry_auth(self, auth: RegistryAuthRecord) -> RegistryAuthRecord:
        try:
            await self._execute_named("create_registry_auth", **registry_auth_params(auth))
        except asyncpg.UniqueViolationError:
            raise Conflict(
                f"a container registry auth named {auth.name!r} already exists"
            ) from None
        return auth

    async def list_registry_auths(self, user_id: str) -> list[RegistryAuthRecord]:
        rows = await self._fetch_named("list_registry_auths", user_id=user_id)
        return [registry_auth_from_row(r) for r in rows]

    async def get_registry_auth(self, user_id: str, auth_id: str) -> RegistryAuthRecord | None:
        row = await self._fetchrow_named("get_registry_auth", user_id=user_id, id=auth_id)
        return registry_auth_from_row(row) if row else None

    async def delete_registry_auth(self, user_id: str, auth_id: str) -> bool:
        return await self._execute_named("delete_registry_auth", user_id=user_id, id=auth_id) > 0

    # -- templates ------------------------------------------------------------------------
    async def create_template(self, user_id: str, template: Template, now: float) -> Template:
        try:
            await self._execute_named(
                "create_template", **template_params(user_id, template), created_at=now
            )
        except asyncpg.UniqueViolationError:
            raise Conflict(f"a template named {template.name!r} already exists") from None
        return template

    async def list_templates(self, user_id: str) -> list[Template]:
        rows = await self._fetch_named("list_templates", user_id=user_id)
        return [Template.model_validate_json(r["spec"]) for r in rows]

    async def get_template(self, user_id: str, template_id: str) -> Template | None:
        row = await self._fetchrow_named("get_template", user_id=user_id, id=template_id)
        return Template.model_validate_json(row["spec"]) if row else None

    async def update_template(self, user_id: str, template: Template) -> Template:
        try:
            await self._execute_named("update_template", **template_params(user_id, template))
        except asyncpg.UniqueViolationError:
            raise Conflict(f"a template named {template.name!r} already exists") from None
        return template

    async def delete_template(self, user_id: str, template_id: str) -> bool:
        return await self._execute_named("delete_template", user_id=user_id, id=template_id) > 0

    # -- endpoints ------------------------------------------------------------------------
    _ENDPOINT_SQL = "SELECT id, user_id, spec, version, created_at FROM endpoints"

    async def create_endpoint(self, endpoint: Endpoint) -> Endpoint:
        await self._execute(
            "INSERT INTO endpoints (id, user_id, template_id, spec, version, created_at)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            endpoint.id,
            endpoint.userId,
            endpoint.spec.templateId,
            endpoint.spec.model_dump_json(),
            endpoint.version,
            endpoint.createdAt,
        )
        return endpoint

    async def list_endpoints(self, user_id: str | None) -> list[Endpoint]:
        if user_id is None:
            rows = await self._fetch(self._ENDPOINT_SQL + " ORDER BY created_at")
        else:
            rows = await self._fetch(
                self._ENDPOINT_SQL + " WHERE user_id = $1 ORDER BY created_at", user_id
            )
        return [endpoint_from_row(r) for r in rows]

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        row = await self._fetchrow(self._ENDPOINT_SQL + " WHERE id = $1", endpoint_id)
        return endpoint_from_row(row) if row else None

    async def update_endpoint(
        self, endpoint_id: str, spec: EndpointSpec, bump_version: bool
    ) -> Endpoint | None:
        row = await self._fetchrow(
            "UPDATE endpoints SET spec = $1, template_id = $2, version = version + $3"
            " WHERE id = $4 RETURNING id, user_id, spec, version, created_at",
            spec.model_dump_json(),
            spec.templateId,
            int(bump_version),
            endpoint_id,
        )
        return endpoint_from_row(row) if row else None

    async def bump_endpoint_versions(self, template_id: str) -> list[str]:
        rows = await self._fetch(
            "UPDATE endpoints SET version = version + 1 WHERE template_id = $1 RETURNING id",
            template_id,
        )
        return [r[0] for r in rows]

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        async with self.pool.acquire() as c, c.transaction():
            await c.execute(
                "DELETE FROM stream_chunks WHERE job_id IN"
                " (SELECT id FROM jobs WHERE endpoint_id = $1)",
                endpoint_id,
            )
            await c.execute("DELETE FROM jobs WHERE endpoint_id = $1", endpoint_id)
            await c.execute("DELETE FROM workers WHERE endpoint_id = $1", endpoint_id)
            status: str = await c.execute("DELETE FROM endpoints WHERE id = $1", endpoint_id)
        return status != "DELETE 0"

    async def endpoints_using_template(self, template_id: str) -> list[str]:
        rows = await self._fetch("SELECT id FROM endpoints WHERE template_id = $1", template_id)
        return [r[0] for r in rows]

    # -- jobs -----------------------------------------------------------------------------
    async def insert_job(self, job: Job) -> None:
        await self._execute(
            "INSERT INTO jobs (id, endpoint_id, status, input, execution_timeout_ms, ttl_ms,"
            " low_priority, webhook, s3_config, submitted_at, expires_at, retention_ms)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            job.id,
            job.endpoint_id,
            job.status.value,
            job.input_json,
            job.execution_timeout_ms,
            job.ttl_ms,
            job.low_priority,
            job.webhook,
            job.s3_config_json,
            job.submitted_at,
            job.submitted_at + job.ttl_ms / 1000.0,
            job.retention_ms,
        )

    async def get_job(self, endpoint_id: str, job_id: str) -> Job | None:
        row = await self._fetchrow(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND endpoint_id = $2",
            job_id,
            endpoint_id,
        )
        return job_from_row(row) if row else None

    async def list_jobs(self, endpoint_id: str, limit: int, before_seq: int | None) -> list[Job]:
        if before_seq is None:
            rows = await self._fetch(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE endpoint_id = $1 ORDER BY seq DESC LIMIT $2",
                endpoint_id,
                limit,
            )
        else:
            rows = await self._fetch(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE endpoint_id = $1 AND seq < $2"
                f" ORDER BY seq DESC LIMIT $3",
                endpoint_id,
                before_seq,
                limit,
            )
        return [job_from_row(r) for r in rows]

    async def set_job_ttl(self, endpoint_id: str, job_id: str, ttl_ms: int) -> Job | None:
        row = await self._fetchrow(
            f"UPDATE jobs SET ttl_ms = $1, expires_at = submitted_at + $1::bigint / 1000.0::float8"
            f" WHERE id = $2 AND endpoint_id = $3 RETURNING {JOB_COLUMNS}",
            ttl_ms,
            job_id,
            endpoint_id,
        )
        return job_from_row(row) if row else None

    async def claim_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        # One statement: the worker's own record gates the claim (a stopping worker gets
        # nothing) and turns running when it got something. A running worker's row is written
        # too (the same values): that takes its row lock, so a release of its last job waits
        # for this claim and then sees the new job (``_let_go``), and a release that idled it
        # first is undone here, as PostgreSQL re-checks the row it waited for. A worker holding
        # a job is never idle.
        rows = await self._fetch(
            f"WITH claimed AS (UPDATE jobs SET status = 'IN_PROGRESS', worker_id = $2,"
            f" started_at = $1, lease_until = $3, attempt = attempt + 1,"
            f" run_deadline = $1::float8 + execution_timeout_ms / 1000.0::float8"
            f" WHERE seq IN (SELECT seq FROM jobs WHERE endpoint_id = $4"
            f" AND status = 'IN_QUEUE' AND expires_at > $1 ORDER BY low_priority, seq LIMIT $5"
            f" FOR UPDATE SKIP LOCKED)"
            f" AND NOT EXISTS (SELECT 1 FROM workers WHERE id = $2"
            f" AND (state IN ('stopping', 'standby') OR recycle))"
            f" RETURNING {JOB_COLUMNS}),"
            f" busy AS (UPDATE workers SET state = 'running', idle_since = NULL"
            f" WHERE id = $2 AND state IN ('initializing', 'idle', 'running')"
            f" AND EXISTS (SELECT 1 FROM claimed))"
            f" SELECT * FROM claimed",
            now,
            worker_id,
            lease_until,
            endpoint_id,
            limit,
        )
        rows.sort(key=lambda r: (r[6], r[22]))
        return [job_from_row(r) for r in rows]

    async def record_progress(self, job_id: str, worker_id: str, output_json: str | None) -> bool:
        return (
            await self._execute(
                "UPDATE jobs SET output = $1 WHERE id = $2 AND worker_id = $3"
                " AND status = 'IN_PROGRESS'",
                output_json,
                job_id,
                worker_id,
            )
            > 0
        )

    async def finish_job(
        self,
        job_id: str,
        worker_id: str | None,
        status: JobStatus,
        output_json: str | None,
        error: str | None,
        now: float,
    ) -> Job | None:
        guard = sql_in(sources_of(status) & {JobStatus.IN_PROGRESS})
        sql = (
            f"UPDATE jobs SET status = $2, output = $3, error = $4, finished_at = $1,"
            f" retain_until = {_RETAIN}, lease_until = NULL, run_deadline = NULL"
            f" WHERE id = $5 AND status IN {guard}"
        )
        args: tuple[Any, ...] = (now, status.value, output_json, error, job_id)
        if worker_id is not None:
            sql += " AND worker_id = $6"
            args += (worker_id,)
        sql += f" RETURNING {JOB_COLUMNS}"
        async with self.pool.acquire() as c, c.transaction():
            row = await c.fetchrow(sql, *args)
            if row is None:
                return None
            job = job_from_row(row)
            await _after_final(c, [job])
            if worker_id is not None:
                await _let_go(c, worker_id, [job_id], now)
        return job

    async def cancel_job(self, endpoint_id: str, job_id: str, now: float) -> Job | None:
        async with self.pool.acquire() as c, c.transaction():
            before = await c.fetchrow(
                "SELECT status, worker_id FROM jobs WHERE id = $1 AND endpoint_id = $2 FOR UPDATE",
                job_id,
                endpoint_id,
            )
            if before is None:
                return None
            row = await c.fetchrow(
                f"UPDATE jobs SET status = 'CANCELLED', finished_at = $1,"
                f" retain_until = {_RETAIN}, lease_until = NULL, run_deadline = NULL"
                f" WHERE id = $2 AND status IN {sql_in(sources_of(JobStatus.CANCELLED))}"
                f" RETURNING {JOB_COLUMNS}",
                now,
                job_id,
            )
            if row is None:
                row = await c.fetchrow(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1", job_id)
                return job_from_row(row)
            job = job_from_row(row)
            if before[0] == JobStatus.IN_PROGRESS.value:
                await _signal_stop(c, [(before[1], job_id)], "cancelled", now)
                job.stop_pending = True
            await _after_final(c, [job])
        return job

    async def retry_job(self, endpoint_id: str, job_id: str) -> Job | None:
        sources = sql_in(sources_of(JobStatus.IN_QUEUE) - {JobStatus.IN_PROGRESS})
        async with self.pool.acquire() as c, c.transaction():
            row = await c.fetchrow(
                f"UPDATE jobs SET status = 'IN_QUEUE', output = NULL, error = NULL,"
                f" started_at = NULL, finished_at = NULL, worker_id = NULL, lease_until = NULL,"
                f" retain_until = NULL, run_deadline = NULL,"
                f" stream_cursor = 0, retries = retries + 1, attempt = 0"
                f" WHERE id = $1 AND endpoint_id = $2 AND status IN {sources}"
                f" RETURNING {JOB_COLUMNS}",
                job_id,
                endpoint_id,
            )
            if row:
                await c.execute("DELETE FROM stream_chunks WHERE job_id = $1", job_id)
                return job_from_row(row)
            row = await c.fetchrow(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND endpoint_id = $2",
                job_id,
                endpoint_id,
            )
        return job_from_row(row) if row else None

    async def purge_queue(self, endpoint_id: str) -> int:
        return await self._execute(
            "DELETE FROM jobs WHERE endpoint_id = $1 AND status = 'IN_QUEUE'", endpoint_id
        )

    async def time_out_jobs(self, now: float) -> list[Job]:
        async with self.pool.acquire() as c, c.transaction():
            rows = await c.fetch(
                f"UPDATE jobs SET status = 'TIMED_OUT', finished_at = $1,"
                f" retain_until = {_RETAIN}, lease_until = NULL, run_deadline = NULL,"
                f" error = 'execution timeout exceeded (policy.executionTimeout: '"
                f" || execution_timeout_ms || ' ms)'"
                f" WHERE status = 'IN_PROGRESS' AND run_deadline <= $1 RETURNING {JOB_COLUMNS}",
                now,
            )
            jobs = [job_from_row(r) for r in rows]
            await _signal_stop(c, [(j.worker_id, j.id) for j in jobs], "timed out", now)
            await _after_final(c, jobs)
        return jobs

    async def expire_jobs(self, now: float, limit: int) -> list[Job]:
        async with self.pool.acquire() as c, c.transaction():
            rows = await c.fetch(
                f"DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE expires_at <= $1"
                f" UNION SELECT seq FROM jobs WHERE retain_until <= $1 LIMIT $2)"
                f" RETURNING {JOB_COLUMNS}",
                now,
                limit,
            )
            jobs = [job_from_row(r) for r in rows]
            running = [(j.worker_id, j.id) for j in jobs if j.status is JobStatus.IN_PROGRESS]
            await _signal_stop(c, running, "ttl expired", now)
            if jobs:
                await c.execute(
                    "DELETE FROM stream_chunks WHERE job_id = ANY($1::text[])",
                    [j.id for j in jobs],
                )
        return jobs

    async def job_counts(self, endpoint_id: str) -> JobCounts:
        counts = job_counts_from(await self._fetch(JOB_COUNTS_SQL.format(p="$1"), endpoint_id))
        if not counts.in_queue_normal:
            return counts
        oldest = await self._fetchrow(
            "SELECT submitted_at FROM jobs WHERE endpoint_id = $1 AND status = 'IN_QUEUE'"
            " AND NOT low_priority ORDER BY seq LIMIT 1",
            endpoint_id,
        )
        return replace(counts, oldest_queued_at=oldest[0] if oldest else None)

    async def fold_job_counts(self) -> int:
        async with self.pool.acquire() as c, c.transaction():
            top = await c.fetchval("SELECT MAX(id) FROM job_count_deltas")
            if top is None:
                return 0
            await c.execute(FOLD_JOB_COUNTS_SQL.format(max="$1"), top)
            status = await c.execute("DELETE FROM job_count_deltas WHERE id <= $1", top)
            await c.execute("DELETE FROM job_counts WHERE n = 0 AND retries = 0")
        return int(status.split()[-1])

    async def append_stream_chunks(
        self, job_id: str, worker_id: str, chunks: list[tuple[str, str | None]]
    ) -> bool:
        async with self.pool.acquire() as c, c.transaction():
            # The row lock serialises appenders of one job, so their numbering cannot clash.
            held = await c.fetchval(
                "SELECT 1 FROM jobs WHERE id = $1 AND worker_id = $2 AND status = 'IN_PROGRESS'"
                " FOR UPDATE",
                job_id,
                worker_id,
            )
            if not held:
                return False
            last: int = await c.fetchval(
                "SELECT COALESCE(MAX(seq), 0) FROM stream_chunks WHERE job_id = $1", job_id
            )
            if chunks:
                await c.executemany(
                    "INSERT INTO stream_chunks (job_id, seq, output, metrics)"
                    " VALUES ($1, $2, $3, $4)",
                    [(job_id, last + i, out, met) for i, (out, met) in enumerate(chunks, start=1)],
                )
        return True

    async def read_new_stream_chunks(self, job_id: str) -> list[StreamChunk]:
        async with self.pool.acquire() as c, c.transaction():
            # Locking the job row makes concurrent readers take turns: each chunk is read once.
            cursor = await c.fetchval(
                "SELECT stream_cursor FROM jobs WHERE id = $1 FOR UPDATE", job_id
            )
            if cursor is None:
                return []
            rows = await c.fetch(
                "SELECT seq, output, metrics FROM stream_chunks WHERE job_id = $1 AND seq > $2"
                " ORDER BY seq",
                job_id,
                cursor,
            )
            if rows:
                await c.execute(
                    "UPDATE jobs SET stream_cursor = $1 WHERE id = $2", rows[-1][0], job_id
                )
        return [StreamChunk(r[0], r[1], r[2]) for r in rows]

    async def take_stop_signals(self, worker_id: str) -> list[str]:
        rows = await self._fetch(
            "UPDATE stop_signals SET delivered = TRUE WHERE worker_id = $1 AND NOT delivered"
            " RETURNING job_id",
            worker_id,
        )
        return sorted(r[0] for r in rows)

    async def release_holds(self, worker_id: str, job_ids: list[str] | None, now: float) -> None:
        async with self.pool.acquire() as c, c.transaction():
            await _let_go(c, worker_id, job_ids, now)

    async def overdue_stop_workers(self, signalled_before: float) -> list[str]:
        rows = await self._fetch(
            "SELECT DISTINCT worker_id FROM stop_signals WHERE created_at <= $1 ORDER BY 1",
            signalled_before,
        )
        return [r[0] for r in rows]

    async def renew_leases(self, worker_id: str, job_ids: list[str], lease_until: float) -> None:
        if not job_ids:
            return
        await self._execute(
            "UPDATE jobs SET lease_until = $1 WHERE id = ANY($2::text[]) AND worker_id = $3"
            " AND status = 'IN_PROGRESS'",
            lease_until,
            job_ids,
            worker_id,
        )

    async def release_jobs(
        self, worker_id: str | None, now: float, max_attempts: int, reason: str
    ) -> list[Job]:
        where: str
        param: Any
        if worker_id is None:
            where, param = "status = 'IN_PROGRESS' AND lease_until < $1", now
        else:
            where, param = "status = 'IN_PROGRESS' AND worker_id = $1", worker_id
        async with self.pool.acquire() as c, c.transaction():
            failed = [
                job_from_row(r)
                for r in await c.fetch(
                    f"UPDATE jobs SET status = 'FAILED', error = $2, finished_at = $3,"
                    f" retain_until = $3::float8 + retention_ms / 1000.0::float8,"
                    f" lease_until = NULL, run_deadline = NULL"
                    f" WHERE {where} AND attempt >= $4 RETURNING {JOB_COLUMNS}",
                    param,
                    reason,
                    now,
                    max_attempts,
                )
            ]
            requeued = [
                job_from_row(r)
                for r in await c.fetch(
                    f"UPDATE jobs SET status = 'IN_QUEUE', worker_id = NULL, started_at = NULL,"
                    f" lease_until = NULL, run_deadline = NULL, output = NULL,"
                    f" retries = retries + 1, stream_cursor = 0"
                    f" WHERE {where} RETURNING {JOB_COLUMNS}",
                    param,
                )
            ]
            if requeued:
                await c.execute(
                    "DELETE FROM stream_chunks WHERE job_id = ANY($1::text[])",
                    [j.id for j in requeued],
                )
            await _after_final(c, failed)
        return failed + requeued

    # -- webhooks -------------------------------------------------------------------------
    async def webhook_secret(self, user_id: str, rotate: bool = False) -> str:
        async with self.pool.acquire() as c, c.transaction():
            row = await c.fetchrow(
                "SELECT webhook_secret FROM users WHERE id = $1 FOR UPDATE", user_id
            )
            if row is None:
                raise KeyError(user_id)
            if row[0] and not rotate:
                return str(row[0])
            secret = new_webhook_secret()
            await c.execute("UPDATE users SET webhook_secret = $1 WHERE id = $2", secret, user_id)
        return secret

    _DELIVERY_COLUMNS = (
        "d.id, d.job_id, d.endpoint_id, d.user_id, d.url, d.payload, d.status, d.attempts,"
        " d.next_attempt_at, d.last_error, d.created_at, d.finished_at, u.webhook_secret"
    )

    async def due_webhook_deliveries(self, now: float, limit: int) -> list[WebhookDelivery]:
        rows = await self._fetch(
            f"SELECT {self._DELIVERY_COLUMNS} FROM webhook_deliveries d"
            f" LEFT JOIN users u ON u.id = d.user_id"
            f" WHERE d.status = 'pending' AND d.next_attempt_at <= $1"
            f" ORDER BY d.next_attempt_at LIMIT $2",
            now,
            limit,
        )
        return [WebhookDelivery(*r) for r in rows]

    async def webhook_deliveries_of(self, job_id: str) -> list[WebhookDelivery]:
        rows = await self._fetch(
            f"SELECT {self._DELIVERY_COLUMNS} FROM webhook_deliveries d"
            f" LEFT JOIN users u ON u.id = d.user_id WHERE d.job_id = $1 ORDER BY d.created_at",
            job_id,
        )
        return [WebhookDelivery(*r) for r in rows]

    async def record_webhook_attempt(
        self,
        delivery_id: str,
        status: str,
        error: str | None,
        now: float,
        next_attempt_at: float | None,
    ) -> None:
        await self._execute(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, status = $1,"
            " last_error = $2, next_attempt_at = COALESCE($3, next_attempt_at),"
            " finished_at = CASE WHEN $1 = 'pending' THEN NULL ELSE $4::float8 END WHERE id = $5",
            status,
            error,
            next_attempt_at,
            now,
            delivery_id,
        )

    # -- workers --------------------------------------------------------------------------
    async def save_worker(self, worker: Worker) -> None:
        await self._execute(
            f"INSERT INTO workers ({WORKER_COLUMNS})"
            f" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
            f" ON CONFLICT (id) DO UPDATE SET endpoint_id = EXCLUDED.endpoint_id,"
            f" kind = EXCLUDED.kind, state = EXCLUDED.state, version = EXCLUDED.version,"
            f" started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen,"
            f" idle_since = EXCLUDED.idle_since, pid = EXCLUDED.pid, gpu = EXCLUDED.gpu,"
            f" recycle = EXCLUDED.recycle, gpu_ids = EXCLUDED.gpu_ids, owner = EXCLUDED.owner",
            *worker_params(worker),
        )

    async def add_worker(self, worker: Worker) -> Worker:
        async with self.pool.acquire() as c, c.transaction():
            await c.execute(
                f"INSERT INTO workers ({WORKER_COLUMNS})"
                f" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
                f" ON CONFLICT (id) DO NOTHING",
                *worker_params(worker),
            )
            row = await c.fetchrow(f"SELECT {WORKER_COLUMNS} FROM workers WHERE id = $1", worker.id)
        return worker_from_row(row)

    async def update_worker(self, worker_id: str, fields: Mapping[str, object]) -> Worker | None:
        unknown = set(fields) - WORKER_FIELDS
        if unknown:
            raise ValueError(f"not worker fields: {sorted(unknown)}")
        if not fields:
            return await self.get_worker(worker_id)
        names = list(fields)
        assignments = ", ".join(f"{name} = ${i}" for i, name in enumerate(names, start=2))
        row = await self._fetchrow(
            f"UPDATE workers SET {assignments} WHERE id = $1 RETURNING {WORKER_COLUMNS}",
            worker_id,
            *(_pg_value(fields[name]) for name in names),
        )
        return worker_from_row(row) if row else None

    async def touch_worker(self, worker_id: str, now: float) -> Worker | None:
        row = await self._fetchrow(
            f"UPDATE workers SET last_seen = $1,"
            f" idle_since = CASE WHEN state = 'initializing' THEN $1 ELSE idle_since END,"
            f" state = CASE WHEN state = 'initializing' THEN 'idle' ELSE state END"
            f" WHERE id = $2 RETURNING {WORKER_COLUMNS}",
            now,
            worker_id,
        )
        return worker_from_row(row) if row else None

    async def get_worker(self, worker_id: str) -> Worker | None:
        row = await self._fetchrow(f"SELECT {WORKER_COLUMNS} FROM workers WHERE id = $1", worker_id)
        return worker_from_row(row) if row else None

    async def list_workers(self, endpoint_id: str | None) -> list[Worker]:
        if endpoint_id is None:
            rows = await self._fetch(f"SELECT {WORKER_COLUMNS} FROM workers ORDER BY started_at")
        else:
            rows = await self._fetch(
                f"SELECT {WORKER_COLUMNS} FROM workers WHERE endpoint_id = $1 ORDER BY started_at",
                endpoint_id,
            )
        return [worker_from_row(r) for r in rows]

    async def delete_worker(self, worker_id: str) -> None:
        async with self.pool.acquire() as c, c.transaction():
            await c.execute("DELETE FROM workers WHERE id = $1", worker_id)
            await c.execute("DELETE FROM stop_signals WHERE worker_id = $1", worker_id)

    async def jobs_of_worker(self, worker_id: str) -> list[str]:
        rows = await self._fetch(
            "SELECT id FROM jobs WHERE worker_id = $1 AND status = 'IN_PROGRESS'"
            " UNION SELECT job_id FROM stop_signals WHERE worker_id = $1 ORDER BY 1",
            worker_id,
        )
        return [r[0] for r in rows]

    async def set_worker_failure(self, endpoint_id: str, failure_json: str | None) -> None:
        await self._execute(
            "UPDATE endpoints SET worker_failure = $1 WHERE id = $2", failure_json, endpoint_id
        )

    async def worker_failure(self, endpoint_id: str) -> str | None:
        value: str | None = await self.pool.fetchval(
            "SELECT worker_failure FROM endpoints WHERE id = $1", endpoint_id
        )
        return value
