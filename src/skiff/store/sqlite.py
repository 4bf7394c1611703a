"""The embedded default: one SQLite file in WAL mode.

Writes go to one writer thread that takes every write waiting and commits them together
(group commit): under load many requests share one transaction, each in its own savepoint so
one failing operation does not undo the others. A caller's future resolves only after the
COMMIT, so a reply never gets ahead of durability. Point reads run on the event loop's own
connection: in WAL mode readers never wait for the writer, and a read is a few microseconds.
"""

from __future__ import annotations

import asyncio
import enum
import queue
import secrets
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from skiff.datadir import FILE_MODE, create_private_file, make_private_dirs, tighten
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
    JOB_COUNTS_SQL,
    WORKER_FIELDS,
    api_key_from_row,
    api_key_params,
    job_counts_from,
    registry_auth_from_row,
    registry_auth_params,
    template_params,
    user_from_row,
    user_params,
    webhook_payload,
    worker_params,
)
from skiff.store.rows import JOB_COLUMNS as _JOB_COLUMNS
from skiff.store.rows import WORKER_COLUMNS as _WORKER_COLUMNS
from skiff.store.rows import endpoint_from_row as _endpoint
from skiff.store.rows import job_from_row as _job
from skiff.store.rows import sql_in as _in
from skiff.store.rows import worker_from_row as _worker

T = TypeVar("T")
_Op = Callable[[sqlite3.Connection], Any]
#: An operation waiting for the writer, with the future (and its loop) that gets its outcome.
_Pending = tuple[_Op, asyncio.Future[Any], asyncio.AbstractEventLoop]
_MAX_BATCH = 512


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode: a commit survives a crash of the process; only a power loss
    # can take back the last transactions.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def _statements(script: str) -> list[str]:
    """The script's statements one by one (a trigger's body holds semicolons of its own, so
    a piece ends only where SQLite says the statement is complete)."""
    statements, pending = [], ""
    for piece in script.split(";\n"):
        pending += piece + ";\n"
        if sqlite3.complete_statement(pending):
            if pending.strip(" ;\n"):
                statements.append(pending)
            pending = ""
    if pending.strip(" ;\n"):
        statements.append(pending)
    return statements


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply the migrations not applied yet; returns their names."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)"
    )
    done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
    applied = []
    folder = resources.files("skiff.store").joinpath("migrations/sqlite")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql") or entry.name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(entry.read_text()):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations VALUES (?, strftime('%s','now'))", (entry.name,)
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(entry.name)
    return applied


class _Writer:
    """One thread, one connection, every write; batches whatever is waiting into one commit.

    Operations submitted during one turn of an event loop reach the thread together: the first
    one schedules a hand-over at the end of the turn, so under load the thread is woken (and
    contends for the GIL) once per turn, not once per operation."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._queue: queue.SimpleQueue[list[_Pending] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="skiff-sqlite-writer", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        #: Per event loop: what its current turn submitted, not handed over yet.
        self._turn: dict[asyncio.AbstractEventLoop, list[_Pending]] = {}

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        for loop in list(self._turn):
            self._hand_over(loop)
        self._queue.put(None)
        self._thread.join()

    async def submit(self, op: _Op) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        turn = self._turn.get(loop)
        if turn is None:
            turn = self._turn[loop] = []
            loop.call_soon(self._hand_over, loop)
        turn.append((op, future, loop))
        return await future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        turn = self._turn.pop(loop, None)
        if turn:
            self._queue.put(turn)

    def _run(self) -> None:
        try:
            conn = _connect(self._path)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                break
            batch = list(item)
            while len(batch) < _MAX_BATCH:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                batch.extend(nxt)
            self._run_batch(conn, batch)
        conn.close()

    @staticmethod
    def _run_batch(
        conn: sqlite3.Connection,
        batch: list[_Pending],
    ) -> None:
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op, _future, _loop in batch:
                conn.execute("SAVEPOINT op")
                try:
                    result = op(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    outcomes.append((None, exc))
                else:
                    conn.execute("RELEASE op")
                    outcomes.append((result, None))
            conn.execute("COMMIT")
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            outcomes = [(None, exc)] * len(batch)
        # One wake-up per event loop for the whole batch, not one per operation: each
        # call_soon_threadsafe writes to the loop's self-pipe.
        by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
        for (_op, future, loop), (result, error) in zip(batch, outcomes, strict=True):
            by_loop.setdefault(loop, []).append((future, result, error))
        for loop, settled in by_loop.items():
            loop.call_soon_threadsafe(_settle_all, settled)


_Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]


def _settle_all(outcomes: list[_Outcome]) -> None:
    for future, result, error in outcomes:
        if future.cancelled():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


#: ``retain_until`` of a job that just became final, in SQL (with ``?`` for now).
_RETAIN = "? + retention_ms / 1000.0"


def _after_final(
    c: sqlite3.Connection, jobs: list[Job], user_of: dict[str, str] | None = None
) -> None:
    """In the transaction that made jobs final: store their webhook deliveries, so a crash
    right after can lose none (the sender attempts them later)."""
    for job in jobs:
        if job.webhook is None or job.finished_at is None:
            continue
        if user_of is not None and job.endpoint_id in user_of:
            user_id = user_of[job.endpoint_id]
        else:
            row = c.execute(
                "SELECT user_id FROM endpoints WHERE id = ?", (job.endpoint_id,)
            ).fetchone()
            if row is None:
                continue
            user_id = row[0]
        c.execute(
            "INSERT INTO webhook_deliveries (id, job_id, endpoint_id, user_id, url, payload,"
            " next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                secrets.token_hex(12),
                job.id,
                job.endpoint_id,
                user_id,
                job.webhook,
                webhook_payload(job, job.finished_at),
                job.finished_at,
                job.finished_at,
            ),
        )


def _signal_stop(
    c: sqlite3.Connection, jobs: list[tuple[str | None, str]], reason: str, now: float
) -> None:
    """Queue job-stop signals for (worker id, job id) pairs; the row may be gone by then."""
    c.executemany(
        "INSERT OR IGNORE INTO stop_signals (worker_id, job_id, reason, created_at)"
        " VALUES (?, ?, ?, ?)",
        [(worker, job_id, reason, now) for worker, job_id in jobs if worker is not None],
    )


def _let_go(c: sqlite3.Connection, worker_id: str, job_ids: list[str] | None, now: float) -> None:
    """The worker let go of these jobs (all, with None): their stop signals go, and a running
    worker holding no job any more is idle."""
    if job_ids is None:
        c.execute("DELETE FROM stop_signals WHERE worker_id = ?", (worker_id,))
    else:
        c.executemany(
            "DELETE FROM stop_signals WHERE worker_id = ? AND job_id = ?",
            [(worker_id, job_id) for job_id in job_ids],
        )
    c.execute(
        "UPDATE workers SET state = 'idle', idle_since = ? WHERE id = ?"
        " AND state = 'running' AND NOT EXISTS (SELECT 1 FROM jobs"
        " WHERE worker_id = ? AND status = 'IN_PROGRESS')",
        (now, worker_id, worker_id),
    )


_QUERIES = load_queries(Dialect.SQLITE)


def _run(c: sqlite3.Connection, name: str, /, **values: object) -> sqlite3.Cursor:
    """Run a named query; its rows are read by column name. Only this cursor makes
    ``sqlite3.Row`` objects: the hot job queries keep reading plain tuples."""
    query = _QUERIES[name]
    cursor = c.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(query.sql, query.args(values))


def _sqlite_value(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool):
        return int(value)
    return value


class SQLiteStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._writer: _Writer | None = None
        self._reader: sqlite3.Connection | None = None

    # -- lifecycle ----------------------------------------------------------------------
    async def open(self) -> None:
        make_private_dirs(self._path.parent)
        # Made 0600 before SQLite opens it: SQLite gives its -wal and -shm files the mode of the
        # database file, and the database holds secrets (datadir.py). Files left open to others
        # by an earlier version are tightened.
        create_private_file(self._path)
        for companion in ("-wal", "-shm", "-journal"):
            tighten(self._path.with_name(self._path.name + companion), FILE_MODE)
        conn = _connect(self._path)
        try:
            migrate(conn)
        finally:
            conn.close()
        self._writer = _Writer(self._path)
        self._writer.start()
        self._reader = _connect(self._path)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.stop()
            self._writer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        assert self._reader is not None, "store is not open"
        return self._reader.execute(sql, params).fetchall()

    def _query(self, name: str, /, **values: object) -> list[sqlite3.Row]:
        """The rows of a named query, read on the event loop's own connection."""
        assert self._reader is not None, "store is not open"
        return _run(self._reader, name, **values).fetchall()

    async def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        assert self._writer is not None, "store is not open"
        result: T = await self._writer.submit(op)
        return result

    # -- secrets --------------------------------------------------------------------------
    async def secret(self, name: str) -> bytes:
        def op(c: sqlite3.Connection) -> bytes:
            row = _run(c, "get_secret", name=name).fetchone()
            if row:
                return bytes(row["value"])
            value = secrets.token_bytes(32)
            _run(c, "add_secret", name=name, value=value)
            return value

        return await self._write(op)

    # -- users and keys -------------------------------------------------------------------
    async def create_user(self, user: User) -> User:
        def op(c: sqlite3.Connection) -> None:
            try:
                _run(c, "create_user", **user_params(user))
            except sqlite3.IntegrityError:
                raise Conflict(f"a user named {user.name!r} already exists") from None

        await self._write(op)
        return user

    async def get_user_by_name(self, name: str) -> User | None:
        rows = self._query("get_user_by_name", name=name)
        return user_from_row(rows[0]) if rows else None

    async def add_api_key(self, key: ApiKey, key_hash: str) -> ApiKey:
        def op(c: sqlite3.Connection) -> None:
            try:
                _run(c, "add_api_key", **api_key_params(key, key_hash))
            except sqlite3.IntegrityError:
                raise Conflict("this API key is already registered") from None

        await self._write(op)
        return key

    async def find_api_key(self, key_hash: str) -> tuple[ApiKey, User] | None:
        rows = self._query("find_api_key", key_hash=key_hash)
        return api_key_from_row(rows[0]) if rows else None

    async def list_api_keys(self) -> list[tuple[ApiKey, User]]:
        return [api_key_from_row(r) for r in self._query("list_api_keys")]

    async def revoke_api_key(self, key_id: str, now: float) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            return _run(c, "revoke_api_key", now=now, id=key_id).rowcount > 0

        return await self._write(op)

    # -- registry auths -------------------------------------------------------------------
    async def create_registry_auth(self, auth: RegistryAuthRecord) -> RegistryAuthRecord:
        def op(c: sqlite3.Connection) -> None:
            try:
                _run(c, "create_registry_auth", **registry_auth_params(auth))
            except sqlite3.IntegrityError:
                raise Conflict(
                    f"a container registry auth named {auth.name!r} already exists"
                ) from None

        await self._write(op)
        return auth

    async def list_registry_auths(self, user_id: str) -> list[RegistryAuthRecord]:
        rows = self._query("list_registry_auths", user_id=user_id)
        return [registry_auth_from_row(r) for r in rows]

    async def get_registry_auth(self, user_id: str, auth_id: str) -> RegistryAuthRecord | None:
        rows = self._query("get_registry_auth", user_id=user_id, id=auth_id)
        return registry_auth_from_row(rows[0]) if rows else None

    async def delete_registry_auth(self, user_id: str, auth_id: str) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            return _run(c, "delete_registry_auth", user_id=user_id, id=auth_id).rowcount > 0

        return await self._write(op)

    # -- templates ------------------------------------------------------------------------
    async def create_template(self, user_id: str, template: Template, now: float) -> Template:
        def op(c: sqlite3.Connection) -> None:
            try:
                _run(c, "create_template", **template_params(user_id, template), created_at=now)
            except sqlite3.IntegrityError:
                raise Conflict(f"a template named {template.name!r} already exists") from None

        await self._write(op)
        return template

    async def list_templates(self, user_id: str) -> list[Template]:
        rows = self._query("list_templates", user_id=user_id)
        return [Template.model_validate_json(r["spec"]) for r in rows]

    async def get_template(self, user_id: str, template_id: str) -> Template | None:
        rows = self._query("get_template", user_id=user_id, id=template_id)
        return Template.model_validate_json(rows[0]["spec"]) if rows else None

    async def update_template(self, user_id: str, template: Template) -> Template:
        def op(c: sqlite3.Connection) -> None:
            try:
                _run(c, "update_template", **template_params(user_id, template))
            except sqlite3.IntegrityError:
                raise Conflict(f"a template named {template.name!r} already exists") from None

        await self._write(op)
        return template

    async def delete_template(self, user_id: str, template_id: str) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            return _run(c, "delete_template", user_id=user_id, id=template_id).rowcount > 0

        return await self._write(op)

    # -- endpoints ------------------------------------------------------------------------
    _ENDPOINT_SQL = "SELECT id, user_id, spec, version, created_at FROM endpoints"

    async def create_endpoint(self, endpoint: Endpoint) -> Endpoint:
        def op(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO endpoints (id, user_id, template_id, spec, version, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    endpoint.id,
                    endpoint.userId,
                    endpoint.spec.templateId,
                    endpoint.spec.model_dump_json(),
                    endpoint.version,
                    endpoint.createdAt,
                ),
            )

        await self._write(op)
        return endpoint

    async def list_endpoints(self, user_id: str | None) -> list[Endpoint]:
        if user_id is None:
            rows = self._read(self._ENDPOINT_SQL + " ORDER BY created_at")
        else:
            rows = self._read(
                self._ENDPOINT_SQL + " WHERE user_id = ? ORDER BY created_at", (user_id,)
            )
        return [_endpoint(r) for r in rows]

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        rows = self._read(self._ENDPOINT_SQL + " WHERE id = ?", (endpoint_id,))
        return _endpoint(rows[0]) if rows else None

    async def update_endpoint(
        self, endpoint_id: str, spec: EndpointSpec, bump_version: bool
    ) -> Endpoint | None:
        def op(c: sqlite3.Connection) -> Endpoint | None:
            row = c.execute(
                "UPDATE endpoints SET spec = ?, template_id = ?, version = version + ?"
                " WHERE id = ? RETURNING id, user_id, spec, version, created_at",
                (spec.model_dump_json(), spec.templateId, int(bump_version), endpoint_id),
            ).fetchone()
            return _endpoint(row) if row else None

        return await self._write(op)

    async def bump_endpoint_versions(self, template_id: str) -> list[str]:
        def op(c: sqlite3.Connection) -> list[str]:
            rows = c.execute(
                "UPDATE endpoints SET version = version + 1 WHERE template_id = ? RETURNING id",
                (template_id,),
            ).fetchall()
            return [r[0] for r in rows]

        return await self._write(op)

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            c.execute(
                "DELETE FROM stream_chunks WHERE job_id IN"
                " (SELECT id FROM jobs WHERE endpoint_id = ?)",
                (endpoint_id,),
            )
            c.execute("DELETE FROM jobs WHERE endpoint_id = ?", (endpoint_id,))
            c.execute("DELETE FROM workers WHERE endpoint_id = ?", (endpoint_id,))
            return c.execute("DELETE FROM endpoints WHERE id = ?", (endpoint_id,)).rowcount > 0

        return await self._write(op)

    async def endpoints_using_template(self, template_id: str) -> list[str]:
        rows = self._read("SELECT id FROM endpoints WHERE template_id = ?", (template_id,))
        return [r[0] for r in rows]

    # -- jobs -----------------------------------------------------------------------------
    async def insert_job(self, job: Job) -> None:
        params = (
            job.id,
            job.endpoint_id,
            job.status.value,
            job.input_json,
            job.execution_timeout_ms,
            job.ttl_ms,
            int(job.low_priority),
            job.webhook,
            job.s3_config_json,
            job.submitted_at,
            job.submitted_at + job.ttl_ms / 1000.0,
            job.retention_ms,
        )

        def op(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO jobs (id, endpoint_id, status, input, execution_timeout_ms, ttl_ms,"
                " low_priority, webhook, s3_config, submitted_at, expires_at, retention_ms)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                params,
            )

        await self._write(op)

    async def get_job(self, endpoint_id: str, job_id: str) -> Job | None:
        rows = self._read(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ? AND endpoint_id = ?",
            (job_id, endpoint_id),
        )
        return _job(rows[0]) if rows else None

    async def list_jobs(self, endpoint_id: str, limit: int, before_seq: int | None) -> list[Job]:
        if before_seq is None:
            rows = self._read(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE endpoint_id = ? ORDER BY seq DESC LIMIT ?",
                (endpoint_id, limit),
            )
        else:
            rows = self._read(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE endpoint_id = ? AND seq < ?"
                f" ORDER BY seq DESC LIMIT ?",
                (endpoint_id, before_seq, limit),
            )
        return [_job(r) for r in rows]

    async def set_job_ttl(self, endpoint_id: str, job_id: str, ttl_ms: int) -> Job | None:
        def op(c: sqlite3.Connection) -> Job | None:
            row = c.execute(
                f"UPDATE jobs SET ttl_ms = ?, expires_at = submitted_at + ? / 1000.0"
                f" WHERE id = ? AND endpoint_id = ? RETURNING {_JOB_COLUMNS}",
                (ttl_ms, ttl_ms, job_id, endpoint_id),
            ).fetchone()
            return _job(row) if row else None

        return await self._write(op)

    async def claim_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        def op(c: sqlite3.Connection) -> list[Job]:
            refused = c.execute(
                "SELECT 1 FROM workers WHERE id = ?"
                " AND (state IN ('stopping', 'standby') OR recycle)",
                (worker_id,),
            ).fetchone()
            if refused:
                return []
            rows = c.execute(
                f"UPDATE jobs SET status = 'IN_PROGRESS', worker_id = ?, started_at = ?,"
                f" lease_until = ?, attempt = attempt + 1,"
                f" run_deadline = ? + execution_timeout_ms / 1000.0"
                f" WHERE seq IN (SELECT seq FROM jobs WHERE endpoint_id = ? AND status = 'IN_QUEUE'"
                f" AND expires_at > ? ORDER BY low_priority, seq LIMIT ?)"
                f" RETURNING {_JOB_COLUMNS}",
                (worker_id, now, lease_until, now, endpoint_id, now, limit),
            ).fetchall()
            if rows:
                c.execute(
                    "UPDATE workers SET state = 'running', idle_since = NULL"
                    " WHERE id = ? AND state IN ('initializing', 'idle')",
                    (worker_id,),
                )
            rows.sort(key=lambda r: (r[6], r[22]))
            return [_job(r) for r in rows]

        return await self._write(op)

    async def record_progress(self, job_id: str, worker_id: str, output_json: str | None) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            cur = c.execute(
                "UPDATE jobs SET output = ? WHERE id = ? AND worker_id = ?"
                " AND status = 'IN_PROGRESS'",
                (output_json, job_id, worker_id),
            )
            return cur.rowcount > 0

        return await self._write(op)

    async def finish_job(
        self,
        job_id: str,
        worker_id: str | None,
        status: JobStatus,
        output_json: str | None,
        error: str | None,
        now: float,
    ) -> Job | None:
        guard = _in(sources_of(status) & {JobStatus.IN_PROGRESS})
        sql = (
            f"UPDATE jobs SET status = ?, output = ?, error = ?, finished_at = ?,"
            f" retain_until = {_RETAIN}, lease_until = NULL, run_deadline = NULL"
            f" WHERE id = ? AND status IN {guard}"
        )
        params: tuple[Any, ...] = (status.value, output_json, error, now, now, job_id)
        if worker_id is not None:
            sql += " AND worker_id = ?"
            params += (worker_id,)
        sql += f" RETURNING {_JOB_COLUMNS}"

        def op(c: sqlite3.Connection) -> Job | None:
            row = c.execute(sql, params).fetchone()
            if row is None:
                return None
            job = _job(row)
            _after_final(c, [job])
            if worker_id is not None:
                _let_go(c, worker_id, [job_id], now)
            return job

        return await self._write(op)

    async def cancel_job(self, endpoint_id: str, job_id: str, now: float) -> Job | None:
        def op(c: sqlite3.Connection) -> Job | None:
            before = c.execute(
                "SELECT status, worker_id FROM jobs WHERE id = ? AND endpoint_id = ?",
                (job_id, endpoint_id),
            ).fetchone()
            if before is None:
                return None
            row = c.execute(
                f"UPDATE jobs SET status = 'CANCELLED', finished_at = ?, retain_until = {_RETAIN},"
                f" lease_until = NULL, run_deadline = NULL"
                f" WHERE id = ? AND status IN {_in(sources_of(JobStatus.CANCELLED))}"
                f" RETURNING {_JOB_COLUMNS}",
                (now, now, job_id),
            ).fetchone()
            if row is None:
                row = c.execute(
                    f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)
                ).fetchone()
                return _job(row)
            job = _job(row)
            if before[0] == JobStatus.IN_PROGRESS.value:
                _signal_stop(c, [(before[1], job_id)], "cancelled", now)
                job.stop_pending = True
            _after_final(c, [job])
            return job

        return await self._write(op)

    async def retry_job(self, endpoint_id: str, job_id: str) -> Job | None:
        def op(c: sqlite3.Connection) -> Job | None:
            row = c.execute(
                f"UPDATE jobs SET status = 'IN_QUEUE', output = NULL, error = NULL,"
                f" started_at = NULL, finished_at = NULL, worker_id = NULL, lease_until = NULL,"
                f" retain_until = NULL, run_deadline = NULL,"
                f" stream_cursor = 0, retries = retries + 1, attempt = 0"
                f" WHERE id = ? AND endpoint_id = ?"
                f" AND status IN {_in(sources_of(JobStatus.IN_QUEUE) - {JobStatus.IN_PROGRESS})}"
                f" RETURNING {_JOB_COLUMNS}",
                (job_id, endpoint_id),
            ).fetchone()
            if row:
                c.execute("DELETE FROM stream_chunks WHERE job_id = ?", (job_id,))
                return _job(row)
            row = c.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ? AND endpoint_id = ?",
                (job_id, endpoint_id),
            ).fetchone()
            return _job(row) if row else None

        return await self._write(op)

    async def purge_queue(self, endpoint_id: str) -> int:
        def op(c: sqlite3.Connection) -> int:
            return c.execute(
                "DELETE FROM jobs WHERE endpoint_id = ? AND status = 'IN_QUEUE'", (endpoint_id,)
            ).rowcount

        return await self._write(op)

    async def time_out_jobs(self, now: float) -> list[Job]:
        def op(c: sqlite3.Connection) -> list[Job]:
            rows = c.execute(
                f"UPDATE jobs SET status = 'TIMED_OUT', finished_at = ?,"
                f" retain_until = {_RETAIN}, lease_until = NULL, run_deadline = NULL,"
                f" error = 'execution timeout exceeded (policy.executionTimeout: '"
                f" || execution_timeout_ms || ' ms)'"
                f" WHERE status = 'IN_PROGRESS' AND run_deadline <= ? RETURNING {_JOB_COLUMNS}",
                (now, now, now),
            ).fetchall()
            jobs = [_job(r) for r in rows]
            _signal_stop(c, [(j.worker_id, j.id) for j in jobs], "timed out", now)
            _after_final(c, jobs)
            return jobs

        return await self._write(op)

    async def expire_jobs(self, now: float, limit: int) -> list[Job]:
        def op(c: sqlite3.Connection) -> list[Job]:
            rows = c.execute(
                f"DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE expires_at <= ?"
                f" UNION SELECT seq FROM jobs WHERE retain_until <= ? LIMIT ?)"
                f" RETURNING {_JOB_COLUMNS}",
                (now, now, limit),
            ).fetchall()
            jobs = [_job(r) for r in rows]
            running = [(j.worker_id, j.id) for j in jobs if j.status is JobStatus.IN_PROGRESS]
            _signal_stop(c, running, "ttl expired", now)
            c.executemany("DELETE FROM stream_chunks WHERE job_id = ?", [(j.id,) for j in jobs])
            return jobs

        return await self._write(op)

    async def job_counts(self, endpoint_id: str) -> JobCounts:
        counts = job_counts_from(
            self._read(JOB_COUNTS_SQL.format(p="?"), (endpoint_id, endpoint_id))
        )
        if not counts.in_queue_normal:
            return counts
        oldest = self._read(
            "SELECT submitted_at FROM jobs WHERE endpoint_id = ? AND status = 'IN_QUEUE'"
            " AND low_priority = 0 ORDER BY seq LIMIT 1",
            (endpoint_id,),
        )
        return replace(counts, oldest_queued_at=oldest[0][0] if oldest else None)

    async def fold_job_counts(self) -> int:
        def op(c: sqlite3.Connection) -> int:
            top = c.execute("SELECT MAX(id) FROM job_count_deltas").fetchone()[0]
            if top is None:
                return 0
            c.execute(FOLD_JOB_COUNTS_SQL.format(max="?"), (top,))
            folded = c.execute("DELETE FROM job_count_deltas WHERE id <= ?", (top,)).rowcount
            c.execute("DELETE FROM job_counts WHERE n = 0 AND retries = 0")
            return int(folded)

        return await self._write(op)

    async def append_stream_chunks(
        self, job_id: str, worker_id: str, chunks: list[tuple[str, str | None]]
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            held = c.execute(
                "SELECT 1 FROM jobs WHERE id = ? AND worker_id = ? AND status = 'IN_PROGRESS'",
                (job_id, worker_id),
            ).fetchone()
            if not held:
                return False
            last = c.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM stream_chunks WHERE job_id = ?", (job_id,)
            ).fetchone()[0]
            c.executemany(
                "INSERT INTO stream_chunks (job_id, seq, output, metrics) VALUES (?, ?, ?, ?)",
                [(job_id, last + i, out, met) for i, (out, met) in enumerate(chunks, start=1)],
            )
            return True

        return await self._write(op)

    async def read_new_stream_chunks(self, job_id: str) -> list[StreamChunk]:
        def op(c: sqlite3.Connection) -> list[StreamChunk]:
            rows = c.execute(
                "SELECT seq, output, metrics FROM stream_chunks WHERE job_id = ? AND seq >"
                " (SELECT stream_cursor FROM jobs WHERE id = ?) ORDER BY seq",
                (job_id, job_id),
            ).fetchall()
            if rows:
                c.execute("UPDATE jobs SET stream_cursor = ? WHERE id = ?", (rows[-1][0], job_id))
            return [StreamChunk(r[0], r[1], r[2]) for r in rows]

        return await self._write(op)

    async def take_stop_signals(self, worker_id: str) -> list[str]:
        def op(c: sqlite3.Connection) -> list[str]:
            rows = c.execute(
                "UPDATE stop_signals SET delivered = 1 WHERE worker_id = ? AND NOT delivered"
                " RETURNING job_id",
                (worker_id,),
            ).fetchall()
            return sorted(r[0] for r in rows)

        return await self._write(op)

    async def release_holds(self, worker_id: str, job_ids: list[str] | None, now: float) -> None:
        def op(c: sqlite3.Connection) -> None:
            _let_go(c, worker_id, job_ids, now)

        await self._write(op)

    async def overdue_stop_workers(self, signalled_before: float) -> list[str]:
        rows = self._read(
            "SELECT DISTINCT worker_id FROM stop_signals WHERE created_at <= ? ORDER BY worker_id",
            (signalled_before,),
        )
        return [r[0] for r in rows]

    async def renew_leases(self, worker_id: str, job_ids: list[str], lease_until: float) -> None:
        def op(c: sqlite3.Connection) -> None:
            c.executemany(
                "UPDATE jobs SET lease_until = ? WHERE id = ? AND worker_id = ?"
                " AND status = 'IN_PROGRESS'",
                [(lease_until, job_id, worker_id) for job_id in job_ids],
            )

        await self._write(op)

    async def release_jobs(
        self, worker_id: str | None, now: float, max_attempts: int, reason: str
    ) -> list[Job]:
        where: str
        params: tuple[Any, ...]
        if worker_id is None:
            where, params = "status = 'IN_PROGRESS' AND lease_until < ?", (now,)
        else:
            where, params = "status = 'IN_PROGRESS' AND worker_id = ?", (worker_id,)

        def op(c: sqlite3.Connection) -> list[Job]:
            failed = [
                _job(r)
                for r in c.execute(
                    f"UPDATE jobs SET status = 'FAILED', error = ?, finished_at = ?,"
                    f" retain_until = {_RETAIN}, lease_until = NULL, run_deadline = NULL"
                    f" WHERE {where} AND attempt >= ? RETURNING {_JOB_COLUMNS}",
                    (reason, now, now, *params, max_attempts),
                ).fetchall()
            ]
            requeued = [
                _job(r)
                for r in c.execute(
                    f"UPDATE jobs SET status = 'IN_QUEUE', worker_id = NULL, started_at = NULL,"
                    f" lease_until = NULL, run_deadline = NULL, output = NULL,"
                    f" retries = retries + 1, stream_cursor = 0"
                    f" WHERE {where} RETURNING {_JOB_COLUMNS}",
                    params,
                ).fetchall()
            ]
            c.executemany("DELETE FROM stream_chunks WHERE job_id = ?", [(j.id,) for j in requeued])
            _after_final(c, failed)
            return failed + requeued

        return await self._write(op)

    # -- webhooks -------------------------------------------------------------------------
    async def webhook_secret(self, user_id: str, rotate: bool = False) -> str:
        def op(c: sqlite3.Connection) -> str:
            row = c.execute("SELECT webhook_secret FROM users WHERE id = ?", (user_id,)).fetchone()
            if row is None:
                raise KeyError(user_id)
            if row[0] and not rotate:
                return str(row[0])
            secret = new_webhook_secret()
            c.execute("UPDATE users SET webhook_secret = ? WHERE id = ?", (secret, user_id))
            return secret

        return await self._write(op)

    _DELIVERY_COLUMNS = (
        "d.id, d.job_id, d.endpoint_id, d.user_id, d.url, d.payload, d.status, d.attempts,"
        " d.next_attempt_at, d.last_error, d.created_at, d.finished_at, u.webhook_secret"
    )

    async def due_webhook_deliveries(self, now: float, limit: int) -> list[WebhookDelivery]:
        rows = self._read(
            f"SELECT {self._DELIVERY_COLUMNS} FROM webhook_deliveries d"
            f" LEFT JOIN users u ON u.id = d.user_id"
            f" WHERE d.status = 'pending' AND d.next_attempt_at <= ?"
            f" ORDER BY d.next_attempt_at LIMIT ?",
            (now, limit),
        )
        return [WebhookDelivery(*r) for r in rows]

    async def webhook_deliveries_of(self, job_id: str) -> list[WebhookDelivery]:
        rows = self._read(
            f"SELECT {self._DELIVERY_COLUMNS} FROM webhook_deliveries d"
            f" LEFT JOIN users u ON u.id = d.user_id WHERE d.job_id = ? ORDER BY d.created_at",
            (job_id,),
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
        def op(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, status = ?,"
                " last_error = ?, next_attempt_at = COALESCE(?, next_attempt_at),"
                " finished_at = CASE WHEN ? = 'pending' THEN NULL ELSE ? END WHERE id = ?",
                (status, error, next_attempt_at, status, now, delivery_id),
            )

        await self._write(op)

    # -- workers --------------------------------------------------------------------------
    async def save_worker(self, worker: Worker) -> None:
        params = worker_params(worker)

        def op(c: sqlite3.Connection) -> None:
            c.execute(
                f"INSERT OR REPLACE INTO workers ({_WORKER_COLUMNS})"
                f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                params,
            )

        await self._write(op)

    async def add_worker(self, worker: Worker) -> Worker:
        params = worker_params(worker)

        def op(c: sqlite3.Connection) -> Worker:
            c.execute(
                f"INSERT OR IGNORE INTO workers ({_WORKER_COLUMNS})"
                f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                params,
            )
            row = c.execute(
                f"SELECT {_WORKER_COLUMNS} FROM workers WHERE id = ?", (worker.id,)
            ).fetchone()
            return _worker(row)

        return await self._write(op)

    async def update_worker(self, worker_id: str, fields: Mapping[str, object]) -> Worker | None:
        unknown = set(fields) - WORKER_FIELDS
        if unknown:
            raise ValueError(f"not worker fields: {sorted(unknown)}")
        names = list(fields)
        assignments = ", ".join(f"{name} = ?" for name in names)
        values = tuple(_sqlite_value(fields[name]) for name in names)

        def op(c: sqlite3.Connection) -> Worker | None:
            if not names:
                row = c.execute(
                    f"SELECT {_WORKER_COLUMNS} FROM workers WHERE id = ?", (worker_id,)
                ).fetchone()
            else:
                row = c.execute(
                    f"UPDATE workers SET {assignments} WHERE id = ? RETURNING {_WORKER_COLUMNS}",
                    (*values, worker_id),
                ).fetchone()
            return _worker(row) if row else None

        return await self._write(op)

    async def touch_worker(self, worker_id: str, now: float) -> Worker | None:
        def op(c: sqlite3.Connection) -> Worker | None:
            row = c.execute(
                f"UPDATE workers SET last_seen = ?,"
                f" idle_since = CASE WHEN state = 'initializing' THEN ? ELSE idle_since END,"
                f" state = CASE WHEN state = 'initializing' THEN 'idle' ELSE state END"
                f" WHERE id = ? RETURNING {_WORKER_COLUMNS}",
                (now, now, worker_id),
            ).fetchone()
            return _worker(row) if row else None

        return await self._write(op)

    async def get_worker(self, worker_id: str) -> Worker | None:
        rows = self._read(f"SELECT {_WORKER_COLUMNS} FROM workers WHERE id = ?", (worker_id,))
        return _worker(rows[0]) if rows else None

    async def list_workers(self, endpoint_id: str | None) -> list[Worker]:
        if endpoint_id is None:
            rows = self._read(f"SELECT {_WORKER_COLUMNS} FROM workers ORDER BY started_at")
        else:
            rows = self._read(
                f"SELECT {_WORKER_COLUMNS} FROM workers WHERE endpoint_id = ? ORDER BY started_at",
                (endpoint_id,),
            )
        return [_worker(r) for r in rows]

    async def delete_worker(self, worker_id: str) -> None:
        def op(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM workers WHERE id = ?", (worker_id,))
            c.execute("DELETE FROM stop_signals WHERE worker_id = ?", (worker_id,))

        await self._write(op)

    async def jobs_of_worker(self, worker_id: str) -> list[str]:
        rows = self._read(
            "SELECT id FROM jobs WHERE worker_id = ? AND status = 'IN_PROGRESS'"
            " UNION SELECT job_id FROM stop_signals WHERE worker_id = ? ORDER BY 1",
            (worker_id, worker_id),
        )
        return [r[0] for r in rows]

    async def set_worker_failure(self, endpoint_id: str, failure_json: str | None) -> None:
        def op(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE endpoints SET worker_failure = ? WHERE id = ?", (failure_json, endpoint_id)
            )

        await self._write(op)

    async def worker_failure(self, endpoint_id: str) -> str | None:
        rows = self._read("SELECT worker_failure FROM endpoints WHERE id = ?", (endpoint_id,))
        return rows[0][0] if rows else None
