"""The shared backend: PostgreSQL through an asyncpg connection pool.

Same semantics as ``SQLiteStore``: every state change is one conditional statement guarded by
the states a job may move from; operations that take several statements run in one
transaction. Claims lock their rows with ``FOR UPDATE SKIP LOCKED`` so replicas claiming at
once never wait on, nor hand out, the same job.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from skiff.domain.billing import Usage
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus
from skiff.domain.pods import Pod, PodPlacement
from skiff.domain.public_models import PublicModel
from skiff.domain.templates import Template
from skiff.domain.volumes import NetworkVolume, VolumeUsers
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
from skiff.store.named_queries import Dialect, Query, compile_query
from skiff.store.named_queries import load as load_queries
from skiff.store.rows import (
    LB_DEMAND_KEPT_SECONDS,
    api_key_from_row,
    api_key_params,
    claim_order,
    endpoint_from_row,
    endpoint_params,
    finishes_in_progress,
    job_counts_from,
    job_from_row,
    job_params,
    network_volume_from_row,
    network_volume_params,
    pod_from_row,
    pod_params,
    pod_settings_params,
    public_model_from_row,
    public_model_params,
    registry_auth_from_row,
    registry_auth_params,
    stream_chunk_from_row,
    template_params,
    usage_from_row,
    usage_params,
    user_from_row,
    user_params,
    webhook_delivery_from_row,
    webhook_delivery_params,
    worker_field_values,
    worker_from_row,
    worker_params,
    worker_update_sql,
)

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
        folder = resources.files("skiff.store").joinpath("migrations/postgres")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".sql") or entry.name in done:
                continue
            await conn.execute(entry.read_text())
            await conn.execute(record, entry.name)
            if entry.name in EARLIER_NAMES:
                await conn.execute(record, EARLIER_NAMES[entry.name])
            applied.append(entry.name)
    return applied


_QUERIES = load_queries(Dialect.POSTGRES)


async def _fetch(conn: Any, name: str, /, **values: object) -> list[Any]:
    """The rows of a named query; a Record is read by column name."""
    query = _QUERIES[name]
    rows: list[Any] = await conn.fetch(query.sql, *query.args(values))
    return rows


async def _fetchrow(conn: Any, name: str, /, **values: object) -> Any:
    query = _QUERIES[name]
    return await conn.fetchrow(query.sql, *query.args(values))


async def _execute(conn: Any, name: str, /, **values: object) -> int:
    """Run a named query; returns the number of rows it touched."""
    query = _QUERIES[name]
    return _touched(await conn.execute(query.sql, *query.args(values)))


def _touched(status: str) -> int:
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


async def _execute_many(conn: Any, name: str, values: list[Mapping[str, object]]) -> None:
    if values:
        query = _QUERIES[name]
        await conn.executemany(query.sql, [query.args(v) for v in values])


@functools.cache
def _worker_update(fields: tuple[str, ...]) -> Query | None:
    """``update_worker``'s statement for these fields, compiled once per set of fields."""
    if not fields:
        return None
    return compile_query("update_worker", worker_update_sql(fields), Dialect.POSTGRES)


async def _after_final(conn: Any, jobs: list[Job]) -> None:
    """In the transaction that made jobs final: store their webhook deliveries."""
    for job in jobs:
        if job.webhook is None or job.finished_at is None:
            continue
        owner = await _fetchrow(conn, "endpoint_owner", endpoint_id=job.endpoint_id)
        if owner is None:
            continue
        params = webhook_delivery_params(job, owner["user_id"], job.finished_at)
        await _execute(conn, "add_webhook_delivery", **params)


async def _signal_stop(
    conn: Any, jobs: list[tuple[str | None, str]], reason: str, now: float
) -> None:
    """Queue job-stop signals for (worker id, job id) pairs; the row may be gone by then."""
    await _execute_many(
        conn,
        "add_stop_signal",
        [
            {"worker_id": worker, "job_id": job_id, "reason": reason, "now": now}
            for worker, job_id in jobs
            if worker is not None
        ],
    )


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


async def _let_go(conn: Any, worker_id: str, job_ids: list[str] | None, now: float) -> None:
    """The worker let go of these jobs (all, with None): their stop signals go, and a running
    worker holding no job any more is idle.

    Under READ COMMITTED two transactions each letting go of one of a worker's last two jobs
    would each still see the other's job in progress, so neither would idle the worker. So the
    worker's row is locked first, in a statement of its own: the next statement takes a fresh
    snapshot once the lock is held, and sees every job change of the transactions that held the
    lock before (other releases, and claims, which lock the row too). Locks are taken in the
    order jobs, workers, stop signals (as ``delete_worker``), so this cannot deadlock."""
    state = await conn.fetchval(_LOCK_WORKER, worker_id)
    if state != "running":
        if job_ids is None or job_ids:
            await _execute(conn, "forget_stop_signals", worker_id=worker_id, job_ids=job_ids)
        return
    # One statement for both, so the lock costs no round trip over the two statements before.
    await conn.execute(_FORGET_AND_IDLE, worker_id, job_ids, now)


async def _advance_lineup(
    conn: Any,
    worker_id: str,
    now: float,
    through: str | None = None,
    told: frozenset[str] = frozenset(),
) -> bool:
    """The worker's running job ended: start the next job lined up on it. When that job is no
    longer wanted (cancelled, purged, expired), the worker, which has it queued, will start it
    on its own: nothing is started, its row stays, and True is returned: the line is broken,
    and the worker must be ended before it is answered (services/lineup.py). It gets a stop
    signal too, for a worker that cannot be ended; one whose stop signal the worker was just
    given (``told``) is passed over: the worker is past it. With ``through``, a result for that
    lined-up job arrived: every job up to it started unseen, and it is started too (to be
    finished); if it is no longer wanted, the worker has moved on past it, so the job after it
    starts."""
    # The last row the worker is past.
    passed: int | None = None
    for row in await _fetch(conn, "lineup_of_worker", worker_id=worker_id):
        job_id = row["job_id"]
        started = await _fetchrow(
            conn, "start_lined_up_job", id=job_id, worker_id=worker_id, now=now
        )
        if job_id == through:
            through = None
            if started is None:
                # The worker ran it already: no stop signal; the next one is what it runs now.
                passed = row["pos"]
                continue
        elif started is None:
            await _signal_stop(conn, [(worker_id, job_id)], "no longer wanted", now)
            if through is None and job_id not in told:
                if passed is not None:
                    await _execute(conn, "drop_lineup_through", worker_id=worker_id, pos=passed)
                return True
            passed = row["pos"]
            continue
        elif through is not None:
            passed = row["pos"]
            continue
        await _execute(conn, "drop_lineup_through", worker_id=worker_id, pos=row["pos"])
        return False
    await _execute(conn, "drop_lineup", worker_id=worker_id)
    return False


async def _unline(conn: Any, worker_id: str | None, now: float) -> list[Job]:
    """Lined-up jobs of a lost worker (or whose lease lapsed) go back to the queue untouched."""
    if worker_id is None:
        rows = await _fetch(conn, "unline_jobs_of_lapsed_leases", now=now)
        if rows:
            await _execute(conn, "drop_lineups_of_unlined")
    else:
        await _execute(conn, "drop_lineup", worker_id=worker_id)
        rows = await _fetch(conn, "unline_jobs_of_worker", worker_id=worker_id)
    return [job_from_row(r) for r in rows]


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
    async def open(self) -> list[str]:
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
        return applied

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> Any:
        assert self._pool is not None, "store is not open"
        return self._pool

    # Named queries (``store/queries``) on a connection of the pool.
    async def _fetch_named(self, name: str, /, **values: object) -> list[Any]:
        return await _fetch(self.pool, name, **values)

    async def _fetchrow_named(self, name: str, /, **values: object) -> Any:
        return await _fetchrow(self.pool, name, **values)

    async def _execute_named(self, name: str, /, **values: object) -> int:
        return await _execute(self.pool, name, **values)

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

    async def update_registry_auth_credentials(
        self, user_id: str, auth_id: str, username: str, password: str
    ) -> bool:
        changed = await self._execute_named(
            "update_registry_auth_credentials",
            user_id=user_id,
            id=auth_id,
            username=username,
            password=password,
        )
        return changed > 0

    async def get_pub_key(self, user_id: str) -> str | None:
        row = await self._fetchrow_named("get_user_pub_key", user_id=user_id)
        return str(row["pub_key"]) if row else None

    async def set_pub_key(self, user_id: str, pub_key: str) -> None:
        await self._execute_named("set_user_pub_key", user_id=user_id, pub_key=pub_key)

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

    # -- network volumes ------------------------------------------------------------------
    async def create_network_volume(self, user_id: str, volume: NetworkVolume) -> NetworkVolume:
        await self._execute_named("create_network_volume", **network_volume_params(user_id, volume))
        return volume

    async def list_network_volumes(self, user_id: str) -> list[NetworkVolume]:
        rows = await self._fetch_named("list_network_volumes", user_id=user_id)
        return [network_volume_from_row(r) for r in rows]

    async def all_network_volumes(self) -> list[tuple[str, NetworkVolume]]:
        rows = await self._fetch_named("list_all_network_volumes")
        return [(r["user_id"], network_volume_from_row(r)) for r in rows]

    async def get_network_volume(self, user_id: str, volume_id: str) -> NetworkVolume | None:
        row = await self._fetchrow_named("get_network_volume", user_id=user_id, id=volume_id)
        return network_volume_from_row(row) if row else None

    async def update_network_volume(
        self, user_id: str, volume_id: str, name: str, size: int
    ) -> NetworkVolume | None:
        async with self.pool.acquire() as c, c.transaction():
            row = await _fetchrow(
                c, "update_network_volume", name=name, size_gb=size, user_id=user_id, id=volume_id
            )
            if row is None:  # a shrink (left as it is), or no such volume
                row = await _fetchrow(c, "get_network_volume", user_id=user_id, id=volume_id)
        return network_volume_from_row(row) if row else None

    async def delete_network_volume(self, user_id: str, volume_id: str) -> VolumeUsers | None:
        named = {"user_id": user_id, "volume_id": volume_id}
        async with self.pool.acquire() as c, c.transaction():
            endpoints = await _fetch(c, "endpoints_using_network_volume", **named)
            pods = await _fetch(c, "pods_using_network_volume", **named)
            users = VolumeUsers(
                endpoints=tuple(r["id"] for r in endpoints), pods=tuple(r["id"] for r in pods)
            )
            if users:
                return users
            deleted = await _execute(c, "delete_network_volume", user_id=user_id, id=volume_id)
        return VolumeUsers() if deleted else None

    async def endpoints_using_network_volume(self, user_id: str, volume_id: str) -> list[str]:
        rows = await self._fetch_named(
            "endpoints_using_network_volume", user_id=user_id, volume_id=volume_id
        )
        return [r["id"] for r in rows]

    # -- usage ----------------------------------------------------------------------------
    async def open_usage(self, usage: Usage, subject: str, last_seen: float) -> bool:
        params = usage_params(usage, subject, last_seen)
        return await self._execute_named("open_usage", **params) > 0

    async def open_usages(self) -> list[tuple[str, Usage, float]]:
        rows = await self._fetch_named("open_usages")
        return [(r["subject"], usage_from_row(r), r["last_seen"]) for r in rows]

    async def end_usage(self, subject: str, ended_at: float, gap: float) -> bool:
        ended = await self._execute_named("end_usage", subject=subject, ended_at=ended_at, gap=gap)
        return ended > 0

    async def touch_usages(self, now: float) -> None:
        await self._execute_named("touch_usages", now=now)

    async def end_unseen_usages(self, before: float) -> int:
        return await self._execute_named("end_unseen_usages", before=before)

    async def usages_of(self, user_id: str, since: float, until: float) -> list[Usage]:
        rows = await self._fetch_named("usages_of_user", user_id=user_id, since=since, until=until)
        return [usage_from_row(r) for r in rows]

    # -- pods -----------------------------------------------------------------------------
    async def create_pod(self, pod: Pod) -> Pod:
        await self._execute_named("create_pod", **pod_params(pod))
        return pod

    async def list_pods(self, user_id: str | None) -> list[Pod]:
        if user_id is None:
            return [pod_from_row(r) for r in await self._fetch_named("list_all_pods")]
        rows = await self._fetch_named("list_pods_of_user", user_id=user_id)
        return [pod_from_row(r) for r in rows]

    async def get_pod(self, user_id: str, pod_id: str) -> Pod | None:
        row = await self._fetchrow_named("get_pod", user_id=user_id, id=pod_id)
        return pod_from_row(row) if row else None

    async def update_pod_settings(self, pod: Pod) -> Pod | None:
        row = await self._fetchrow_named("update_pod_settings", **pod_settings_params(pod))
        return pod_from_row(row) if row else None

    async def set_pod_placement(
        self, pod_id: str, placement: PodPlacement, last_started_at: float | None
    ) -> Pod | None:
        row = await self._fetchrow_named(
            "set_pod_placement",
            id=pod_id,
            placement=placement.model_dump_json(),
            last_started_at=last_started_at,
        )
        return pod_from_row(row) if row else None

    async def delete_pod(self, user_id: str, pod_id: str) -> bool:
        return await self._execute_named("delete_pod", user_id=user_id, id=pod_id) > 0

    # -- endpoints ------------------------------------------------------------------------
    async def create_endpoint(self, endpoint: Endpoint) -> Endpoint:
        await self._execute_named("create_endpoint", **endpoint_params(endpoint))
        return endpoint

    async def list_endpoints(self, user_id: str | None) -> list[Endpoint]:
        if user_id is None:
            rows = await self._fetch_named("list_endpoints")
        else:
            rows = await self._fetch_named("list_endpoints_of_user", user_id=user_id)
        return [endpoint_from_row(r) for r in rows]

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        row = await self._fetchrow_named("get_endpoint", id=endpoint_id)
        return endpoint_from_row(row) if row else None

    async def update_endpoint(
        self, endpoint_id: str, spec: EndpointSpec, bump_version: bool
    ) -> Endpoint | None:
        row = await self._fetchrow_named(
            "update_endpoint",
            spec=spec.model_dump_json(),
            template_id=spec.templateId,
            bump=int(bump_version),
            id=endpoint_id,
        )
        return endpoint_from_row(row) if row else None

    async def bump_endpoint_versions(self, template_id: str) -> list[str]:
        rows = await self._fetch_named("bump_endpoint_versions", template_id=template_id)
        return [r["id"] for r in rows]

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        async with self.pool.acquire() as c, c.transaction():
            await _execute(c, "delete_stream_chunks_of_endpoint", endpoint_id=endpoint_id)
            await _execute(c, "delete_jobs_of_endpoint", endpoint_id=endpoint_id)
            await _execute(c, "drop_lineups_of_endpoint", endpoint_id=endpoint_id)
            await _execute(c, "delete_workers_of_endpoint", endpoint_id=endpoint_id)
            await _execute(c, "unpublish_endpoint", endpoint_id=endpoint_id)
            deleted = await _execute(c, "delete_endpoint", endpoint_id=endpoint_id)
        return deleted > 0

    async def endpoints_using_template(self, template_id: str) -> list[str]:
        rows = await self._fetch_named("endpoints_using_template", template_id=template_id)
        return [r["id"] for r in rows]

    # -- jobs -----------------------------------------------------------------------------
    async def insert_job(self, job: Job) -> None:
        await self._execute_named("insert_job", **job_params(job))

    async def get_job(self, endpoint_id: str, job_id: str) -> Job | None:
        row = await self._fetchrow_named("get_job", id=job_id, endpoint_id=endpoint_id)
        return job_from_row(row) if row else None

    async def list_jobs(self, endpoint_id: str, limit: int, before_seq: int | None) -> list[Job]:
        if before_seq is None:
            rows = await self._fetch_named("list_jobs", endpoint_id=endpoint_id, limit=limit)
        else:
            rows = await self._fetch_named(
                "list_jobs_before", endpoint_id=endpoint_id, before_seq=before_seq, limit=limit
            )
        return [job_from_row(r) for r in rows]

    async def set_job_ttl(self, endpoint_id: str, job_id: str, ttl_ms: int) -> Job | None:
        row = await self._fetchrow_named(
            "set_job_ttl", ttl_ms=ttl_ms, id=job_id, endpoint_id=endpoint_id
        )
        return job_from_row(row) if row else None

    async def claim_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        rows = await self._fetch_named(
            "claim_jobs",
            worker_id=worker_id,
            now=now,
            lease_until=lease_until,
            endpoint_id=endpoint_id,
            limit=limit,
        )
        return sorted((job_from_row(r) for r in rows), key=claim_order)

    async def line_up_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        async with self.pool.acquire() as c, c.transaction():
            rows = await _fetch(
                c,
                "line_up_jobs",
                worker_id=worker_id,
                lease_until=lease_until,
                endpoint_id=endpoint_id,
                now=now,
                limit=limit,
            )
            jobs = sorted((job_from_row(r) for r in rows), key=claim_order)
            top = (await _fetchrow(c, "lineup_top", worker_id=worker_id))["top"]
            await _execute_many(
                c,
                "add_to_lineup",
                [
                    {"worker_id": worker_id, "pos": top + 1 + i, "job_id": job.id}
                    for i, job in enumerate(jobs)
                ],
            )
        return jobs

    async def record_progress(self, job_id: str, worker_id: str, output_json: str | None) -> bool:
        touched = await self._execute_named(
            "record_progress", output=output_json, id=job_id, worker_id=worker_id
        )
        return touched > 0

    async def finish_job(
        self,
        job_id: str,
        worker_id: str | None,
        status: JobStatus,
        output_json: str | None,
        error: str | None,
        now: float,
    ) -> Job | None:
        if not finishes_in_progress(status):
            return None
        values = {
            "status": status.value,
            "output": output_json,
            "error": error,
            "now": now,
            "id": job_id,
            "worker_id": worker_id,
        }
        async with self.pool.acquire() as c, c.transaction():
            row = await _fetchrow(c, "finish_job", **values)
            if row is None and worker_id is not None:
                if await _fetchrow(c, "is_lined_up", worker_id=worker_id, job_id=job_id) is None:
                    return None
                await _advance_lineup(c, worker_id, now, through=job_id)
                row = await _fetchrow(c, "finish_job", **values)
            if row is None:
                return None
            job = job_from_row(row)
            await _after_final(c, [job])
            if worker_id is not None:
                # Before the let-go: a worker that starts its next job is not idle.
                job.line_broken = await _advance_lineup(c, worker_id, now)
                await _let_go(c, worker_id, [job_id], now)
        return job

    async def cancel_job(self, endpoint_id: str, job_id: str, now: float) -> Job | None:
        async with self.pool.acquire() as c, c.transaction():
            before = await _fetchrow(c, "job_before_cancel", id=job_id, endpoint_id=endpoint_id)
            if before is None:
                return None
            row = await _fetchrow(c, "cancel_job", now=now, id=job_id)
            if row is None:
                row = await _fetchrow(c, "get_job_by_id", id=job_id)
                return job_from_row(row) if row else None
            job = job_from_row(row)
            if before["status"] == JobStatus.IN_PROGRESS.value:
                await _signal_stop(c, [(before["worker_id"], job_id)], "cancelled", now)
                job.stop_pending = True
            await _after_final(c, [job])
        return job

    async def retry_job(self, endpoint_id: str, job_id: str) -> Job | None:
        async with self.pool.acquire() as c, c.transaction():
            row = await _fetchrow(c, "retry_job", id=job_id, endpoint_id=endpoint_id)
            if row:
                await _execute(c, "delete_stream_chunks", job_id=job_id)
                return job_from_row(row)
            row = await _fetchrow(c, "get_job", id=job_id, endpoint_id=endpoint_id)
        return job_from_row(row) if row else None

    async def purge_queue(self, endpoint_id: str) -> int:
        return await self._execute_named("purge_queue", endpoint_id=endpoint_id)

    async def time_out_jobs(self, now: float) -> list[Job]:
        async with self.pool.acquire() as c, c.transaction():
            jobs = [job_from_row(r) for r in await _fetch(c, "time_out_jobs", now=now)]
            await _signal_stop(c, [(j.worker_id, j.id) for j in jobs], "timed out", now)
            await _after_final(c, jobs)
        return jobs

    async def expire_jobs(self, now: float, limit: int) -> list[Job]:
        async with self.pool.acquire() as c, c.transaction():
            rows = await _fetch(c, "expire_jobs", now=now, limit=limit)
            jobs = [job_from_row(r) for r in rows]
            running = [(j.worker_id, j.id) for j in jobs if j.status is JobStatus.IN_PROGRESS]
            await _signal_stop(c, running, "ttl expired", now)
            if jobs:
                await _execute(c, "delete_stream_chunks_of_jobs", job_ids=[j.id for j in jobs])
        return jobs

    async def job_counts(self, endpoint_id: str) -> JobCounts:
        counts = job_counts_from(await self._fetch_named("job_counts", endpoint_id=endpoint_id))
        if not counts.in_queue_normal:
            return counts
        oldest = await self._fetchrow_named("oldest_queued_at", endpoint_id=endpoint_id)
        return replace(counts, oldest_queued_at=oldest["submitted_at"] if oldest else None)

    async def fold_job_counts(self) -> int:
        # One snapshot for the sum and the delete: under READ COMMITTED each statement sees
        # what committed before it, so a delta (id <= top, taken before a commit still in
        # flight) committed between the two was deleted without being counted. A delta outside
        # the snapshot is left for the next fold.
        try:
            async with self.pool.acquire() as c, c.transaction(isolation="repeatable_read"):
                top = (await _fetchrow(c, "last_job_count_delta"))["top"]
                if top is None:
                    return 0
                await _execute(c, "fold_job_counts", top=top)
                folded = await _execute(c, "delete_folded_job_count_deltas", top=top)
                await _execute(c, "delete_empty_job_counts")
        except asyncpg.SerializationError:
            # Another replica folded the same deltas at the same moment (a change of leader):
            # its fold counted them, this one rolled back whole.
            return 0
        return folded

    async def append_stream_chunks(
        self, job_id: str, worker_id: str, chunks: list[tuple[str, str | None]]
    ) -> bool:
        async with self.pool.acquire() as c, c.transaction():
            if not await _fetchrow(c, "job_taken_by", job_id=job_id, worker_id=worker_id):
                return False
            last: int = (await _fetchrow(c, "last_stream_seq", job_id=job_id))["seq"]
            await _execute_many(
                c,
                "add_stream_chunk",
                [
                    {"job_id": job_id, "seq": last + i, "output": out, "metrics": met}
                    for i, (out, met) in enumerate(chunks, start=1)
                ],
            )
        return True

    async def read_new_stream_chunks(self, job_id: str) -> list[StreamChunk]:
        async with self.pool.acquire() as c, c.transaction():
            job = await _fetchrow(c, "job_stream_cursor", job_id=job_id)
            if job is None:
                return []
            rows = await _fetch(
                c, "stream_chunks_after", job_id=job_id, cursor=job["stream_cursor"]
            )
            if rows:
                await _execute(c, "set_stream_cursor", cursor=rows[-1]["seq"], job_id=job_id)
        return [stream_chunk_from_row(r) for r in rows]

    async def take_stop_signals(self, worker_id: str, now: float) -> list[str]:
        rows = await self._fetch_named("take_stop_signals", worker_id=worker_id)
        if rows:
            # Told to stop the job it ran, the worker starts its next lined-up one at once.
            async with self.pool.acquire() as c, c.transaction():
                if await _fetchrow(c, "worker_runs_a_job", worker_id=worker_id) is None:
                    told = frozenset(r["job_id"] for r in rows)
                    await _advance_lineup(c, worker_id, now, told=told)
        return sorted(r["job_id"] for r in rows)

    async def lineup_broken(self, worker_id: str) -> bool:
        return await self._fetchrow_named("lineup_broken", worker_id=worker_id) is not None

    async def let_go_of_jobs(self, worker_id: str, job_ids: list[str] | None, now: float) -> None:
        async with self.pool.acquire() as c, c.transaction():
            await _let_go(c, worker_id, job_ids, now)

    async def overdue_stop_workers(self, signalled_before: float) -> list[str]:
        rows = await self._fetch_named("overdue_stop_workers", signalled_before=signalled_before)
        return [r["worker_id"] for r in rows]

    async def renew_leases(self, worker_id: str, job_ids: list[str], lease_until: float) -> None:
        if not job_ids:
            return
        async with self.pool.acquire() as c, c.transaction():
            renewed = await _execute(
                c, "renew_leases", lease_until=lease_until, job_ids=job_ids, worker_id=worker_id
            )
            if not renewed:
                for job_id in job_ids:
                    if await _fetchrow(c, "is_lined_up", worker_id=worker_id, job_id=job_id):
                        renewed = 1
                        break
            if renewed:
                await _execute(
                    c, "renew_lineup_leases", lease_until=lease_until, worker_id=worker_id
                )

    async def release_jobs(
        self, worker_id: str | None, now: float, max_attempts: int, reason: str
    ) -> list[Job]:
        async with self.pool.acquire() as c, c.transaction():
            unlined = await _unline(c, worker_id, now)
            if worker_id is None:
                failed = await _fetch(
                    c,
                    "fail_jobs_of_lapsed_leases",
                    reason=reason,
                    now=now,
                    max_attempts=max_attempts,
                )
                requeued = await _fetch(c, "requeue_jobs_of_lapsed_leases", now=now)
            else:
                failed = await _fetch(
                    c,
                    "fail_jobs_of_worker",
                    reason=reason,
                    now=now,
                    worker_id=worker_id,
                    max_attempts=max_attempts,
                )
                requeued = await _fetch(c, "requeue_jobs_of_worker", worker_id=worker_id)
            if requeued:
                ids = [r["id"] for r in requeued]
                await _execute(c, "delete_stream_chunks_of_jobs", job_ids=ids)
            failed_jobs = [job_from_row(r) for r in failed]
            await _after_final(c, failed_jobs)
        return failed_jobs + [job_from_row(r) for r in requeued] + unlined

    # -- webhooks -------------------------------------------------------------------------
    async def webhook_secret(self, user_id: str, rotate: bool = False) -> str:
        async with self.pool.acquire() as c, c.transaction():
            row = await _fetchrow(c, "webhook_secret_of_user", user_id=user_id)
            if row is None:
                raise KeyError(user_id)
            if row["webhook_secret"] and not rotate:
                return str(row["webhook_secret"])
            secret = new_webhook_secret()
            await _execute(c, "set_webhook_secret", secret=secret, user_id=user_id)
        return secret

    async def due_webhook_deliveries(self, now: float, limit: int) -> list[WebhookDelivery]:
        rows = await self._fetch_named("due_webhook_deliveries", now=now, limit=limit)
        return [webhook_delivery_from_row(r) for r in rows]

    async def webhook_deliveries_of(self, job_id: str) -> list[WebhookDelivery]:
        rows = await self._fetch_named("webhook_deliveries_of", job_id=job_id)
        return [webhook_delivery_from_row(r) for r in rows]

    async def record_webhook_attempt(
        self,
        delivery_id: str,
        status: str,
        error: str | None,
        now: float,
        next_attempt_at: float | None,
    ) -> None:
        await self._execute_named(
            "record_webhook_attempt",
            status=status,
            error=error,
            next_attempt_at=next_attempt_at,
            now=now,
            id=delivery_id,
        )

    # -- workers --------------------------------------------------------------------------
    async def save_worker(self, worker: Worker) -> None:
        await self._execute_named("save_worker", **worker_params(worker))

    async def add_worker(self, worker: Worker) -> Worker:
        async with self.pool.acquire() as c, c.transaction():
            await _execute(c, "add_worker", **worker_params(worker))
            row = await _fetchrow(c, "get_worker", id=worker.id)
        return worker_from_row(row)

    async def update_worker(self, worker_id: str, fields: Mapping[str, object]) -> Worker | None:
        query = _worker_update(tuple(fields))
        if query is None:
            return await self.get_worker(worker_id)
        values = {**worker_field_values(fields), "id": worker_id}
        row = await self.pool.fetchrow(query.sql, *query.args(values))
        return worker_from_row(row) if row else None

    async def touch_worker(self, worker_id: str, now: float) -> Worker | None:
        row = await self._fetchrow_named("touch_worker", now=now, id=worker_id)
        return worker_from_row(row) if row else None

    async def set_lb_demand(
        self, replica_id: str, endpoint_id: str, in_flight: int, waiting: int, now: float
    ) -> None:
        async with self.pool.acquire() as c, c.transaction():
            if in_flight or waiting:
                await _execute(
                    c,
                    "set_lb_demand",
                    replica_id=replica_id,
                    endpoint_id=endpoint_id,
                    in_flight=in_flight,
                    waiting=waiting,
                    now=now,
                )
            else:
                await _execute(c, "clear_lb_demand", replica_id=replica_id, endpoint_id=endpoint_id)
            await _execute(c, "drop_stale_lb_demand", before=now - LB_DEMAND_KEPT_SECONDS)

    async def lb_demand_of_others(
        self, replica_id: str, since: float
    ) -> dict[str, tuple[int, int]]:
        rows = await self._fetch_named("lb_demand_of_others", replica_id=replica_id, since=since)
        return {r["endpoint_id"]: (int(r["in_flight"]), int(r["waiting"])) for r in rows}

    async def publish_model(self, model: PublicModel) -> bool:
        return await self._execute_named("publish_model", **public_model_params(model)) > 0

    async def public_models(self) -> list[PublicModel]:
        return [public_model_from_row(r) for r in await self._fetch_named("list_public_models")]

    async def public_model(self, model_id: str) -> PublicModel | None:
        row = await self._fetchrow_named("get_public_model", model_id=model_id)
        return public_model_from_row(row) if row else None

    async def unpublish_model(self, model_id: str) -> bool:
        return await self._execute_named("unpublish_model", model_id=model_id) > 0

    async def worker_ready(self, worker_id: str, now: float) -> Worker | None:
        row = await self._fetchrow_named("worker_ready", now=now, id=worker_id)
        return worker_from_row(row) if row else None

    async def worker_serving(self, worker_id: str, busy: bool, now: float) -> Worker | None:
        state, idle_since = ("running", None) if busy else ("idle", now)
        row = await self._fetchrow_named(
            "worker_serving", state=state, idle_since=idle_since, id=worker_id
        )
        return worker_from_row(row) if row else None

    async def get_worker(self, worker_id: str) -> Worker | None:
        row = await self._fetchrow_named("get_worker", id=worker_id)
        return worker_from_row(row) if row else None

    async def list_workers(self, endpoint_id: str | None) -> list[Worker]:
        if endpoint_id is None:
            rows = await self._fetch_named("list_workers")
        else:
            rows = await self._fetch_named("list_workers_of_endpoint", endpoint_id=endpoint_id)
        return [worker_from_row(r) for r in rows]

    async def delete_worker(self, worker_id: str) -> None:
        async with self.pool.acquire() as c, c.transaction():
            await _execute(c, "delete_worker", worker_id=worker_id)
            await _execute(c, "delete_stop_signals_of_worker", worker_id=worker_id)
            await _execute(c, "drop_lineup", worker_id=worker_id)

    async def jobs_of_worker(self, worker_id: str) -> list[str]:
        return [r["id"] for r in await self._fetch_named("jobs_of_worker", worker_id=worker_id)]

    async def set_worker_failure(self, endpoint_id: str, failure_json: str | None) -> None:
        await self._execute_named(
            "set_worker_failure", failure=failure_json, endpoint_id=endpoint_id
        )

    async def worker_failure(self, endpoint_id: str) -> str | None:
        row = await self._fetchrow_named("worker_failure", endpoint_id=endpoint_id)
        return row["worker_failure"] if row else None
