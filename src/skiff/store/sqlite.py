"""The embedded default: one SQLite file in WAL mode.

Writes go to one writer thread that takes every write waiting and commits them together
(group commit): under load many requests share one transaction, each in its own savepoint so
one failing operation does not undo the others. A caller's future resolves only after the
COMMIT, so a reply never gets ahead of durability. Point reads run on the event loop's own
connection: in WAL mode readers never wait for the writer, and a read is a few microseconds.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import orjson

from skiff.datadir import FILE_MODE, create_private_file, make_private_dirs, tighten
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
    RowReader,
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


_QUERIES = load_queries(Dialect.SQLITE)
#: Per query, the names of its columns, read from its cursor the first time it returns rows.
#: Kept for the process, not per file: every file is migrated to the last migration when it is
#: opened, and migrations run in one order, so a query's columns come in one order in all.
_COLUMNS: dict[str, tuple[str, ...]] = {}


def _run(c: sqlite3.Connection, name: str, /, **values: object) -> sqlite3.Cursor:
    """Run a named query (for its effect, or its ``rowcount``)."""
    query = _QUERIES[name]
    return c.execute(query.sql, query.args(values))


def _rows(c: sqlite3.Connection, name: str, /, **values: object) -> list[dict[str, Any]]:
    """The rows of a named query as dicts, by column name (the column names kept per query:
    ``sqlite3.Row`` would compare names on every access)."""
    query = _QUERIES[name]
    return _named(c.execute(query.sql, query.args(values)), name)


def _named(cursor: sqlite3.Cursor, name: str) -> list[dict[str, Any]]:
    rows = cursor.fetchall()
    if not rows:
        return []
    columns = _columns(cursor, name)
    return [dict(zip(columns, row, strict=True)) for row in rows]


def _columns(cursor: sqlite3.Cursor, name: str) -> tuple[str, ...]:
    columns = _COLUMNS.get(name)
    if columns is None:
        columns = _COLUMNS[name] = tuple(d[0] for d in cursor.description)
    return columns


def _row(c: sqlite3.Connection, name: str, /, **values: object) -> dict[str, Any] | None:
    query = _QUERIES[name]
    rows = _named(c.execute(query.sql, query.args(values)), name)
    return rows[0] if rows else None


#: Per query read into domain objects, its rows' reader (rows.RowReader.for_columns).
_READERS: dict[str, Callable[[Any], Any]] = {}


def _read(c: sqlite3.Connection, name: str, make: RowReader[T], /, **values: object) -> list[T]:
    """The rows of a named query as domain objects. The jobs and workers read on every claim
    and finish skip the dict a row is otherwise made into: each column is found by name once
    per query."""
    query = _QUERIES[name]
    return _objects(c.execute(query.sql, query.args(values)), name, make)


def _objects(cursor: sqlite3.Cursor, name: str, make: RowReader[T]) -> list[T]:
    rows = cursor.fetchall()
    if not rows:
        return []
    read = _READERS.get(name)
    if read is None:
        read = _READERS[name] = make.for_columns(_columns(cursor, name))
    return [read(row) for row in rows]


def _read_one(
    c: sqlite3.Connection, name: str, make: RowReader[T], /, **values: object
) -> T | None:
    query = _QUERIES[name]
    objects = _objects(c.execute(query.sql, query.args(values)), name, make)
    return objects[0] if objects else None


def _run_many(c: sqlite3.Connection, name: str, values: Iterable[Mapping[str, object]]) -> None:
    query = _QUERIES[name]
    c.executemany(query.sql, [query.args(v) for v in values])


@functools.cache
def _worker_update(fields: tuple[str, ...]) -> Query | None:
    """``update_worker``'s statement for these fields, compiled once per set of fields."""
    if not fields:
        return None
    return compile_query("update_worker", worker_update_sql(fields), Dialect.SQLITE)


def _ids(job_ids: list[str] | None) -> str | None:
    """A list of ids as SQLite's queries take it: one JSON array, read with json_each."""
    return None if job_ids is None else orjson.dumps(job_ids).decode()


def _after_final(c: sqlite3.Connection, jobs: list[Job]) -> None:
    """In the transaction that made jobs final: store their webhook deliveries, so a crash
    right after can lose none (the sender attempts them later)."""
    for job in jobs:
        if job.webhook is None or job.finished_at is None:
            continue
        owner = _row(c, "endpoint_owner", endpoint_id=job.endpoint_id)
        if owner is None:
            continue
        params = webhook_delivery_params(job, owner["user_id"], job.finished_at)
        _run(c, "add_webhook_delivery", **params)


def _signal_stop(
    c: sqlite3.Connection, jobs: list[tuple[str | None, str]], reason: str, now: float
) -> None:
    """Queue job-stop signals for (worker id, job id) pairs; the row may be gone by then."""
    _run_many(
        c,
        "add_stop_signal",
        (
            {"worker_id": worker, "job_id": job_id, "reason": reason, "now": now}
            for worker, job_id in jobs
            if worker is not None
        ),
    )


def _let_go(c: sqlite3.Connection, worker_id: str, job_ids: list[str] | None, now: float) -> None:
    """The worker let go of these jobs (all, with None): their stop signals go, and a running
    worker holding no job any more is idle."""
    _run(c, "forget_stop_signals", worker_id=worker_id, job_ids=_ids(job_ids))
    _run(c, "idle_worker_if_free", worker_id=worker_id, now=now)


def _claim(
    c: sqlite3.Connection,
    query: str,
    endpoint_id: str,
    worker_id: str,
    limit: int,
    now: float,
    lease_until: float,
) -> list[Job]:
    """Queued jobs for a worker that may claim (``claim_jobs``, ``line_up_jobs``), in claim
    order. SQLite's UPDATE ... RETURNING has no order, and no gate on the worker of its own."""
    if _run(c, "worker_refuses_claims", worker_id=worker_id).fetchone():
        return []
    jobs = _read(
        c,
        query,
        job_from_row,
        worker_id=worker_id,
        now=now,
        lease_until=lease_until,
        endpoint_id=endpoint_id,
        limit=limit,
    )
    jobs.sort(key=claim_order)
    return jobs


def _advance_lineup(
    c: sqlite3.Connection,
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
    for row in _rows(c, "lineup_of_worker", worker_id=worker_id):
        job_id = row["job_id"]
        job = _read_one(
            c, "start_lined_up_job", job_from_row, id=job_id, worker_id=worker_id, now=now
        )
        if job_id == through:
            through = None
            if job is None:
                # The worker ran it already: no stop signal; the next one is what it runs now.
                passed = row["pos"]
                continue
        elif job is None:
            _signal_stop(c, [(worker_id, job_id)], "no longer wanted", now)
            if through is None and job_id not in told:
                if passed is not None:
                    _run(c, "drop_lineup_through", worker_id=worker_id, pos=passed)
                return True
            passed = row["pos"]
            continue
        elif through is not None:
            passed = row["pos"]
            continue
        _run(c, "drop_lineup_through", worker_id=worker_id, pos=row["pos"])
        return False
    _run(c, "drop_lineup", worker_id=worker_id)
    return False


def _unline(c: sqlite3.Connection, worker_id: str | None, now: float) -> list[Job]:
    """Lined-up jobs of a lost worker (or whose lease lapsed) go back to the queue untouched."""
    if worker_id is None:
        jobs = _read(c, "unline_jobs_of_lapsed_leases", job_from_row, now=now)
        if jobs:
            _run(c, "drop_lineups_of_unlined")
        return jobs
    _run(c, "drop_lineup", worker_id=worker_id)
    return _read(c, "unline_jobs_of_worker", job_from_row, worker_id=worker_id)


class SQLiteStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._writer: _Writer | None = None
        self._reader: sqlite3.Connection | None = None

    # -- lifecycle ----------------------------------------------------------------------
    async def open(self) -> list[str]:
        make_private_dirs(self._path.parent)
        # Made 0600 before SQLite opens it: SQLite gives its -wal and -shm files the mode of the
        # database file, and the database holds secrets (datadir.py). Files left open to others
        # by an earlier version are tightened.
        create_private_file(self._path)
        for companion in ("-wal", "-shm", "-journal"):
            tighten(self._path.with_name(self._path.name + companion), FILE_MODE)
        conn = _connect(self._path)
        try:
            applied = migrate(conn)
        finally:
            conn.close()
        self._writer = _Writer(self._path)
        self._writer.start()
        self._reader = _connect(self._path)
        return applied

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.stop()
            self._writer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _query(self, name: str, /, **values: object) -> list[dict[str, Any]]:
        """The rows of a named query, read on the event loop's own connection."""
        assert self._reader is not None, "store is not open"
        query = _QUERIES[name]
        return _named(self._reader.execute(query.sql, query.args(values)), name)

    def _query_as(self, name: str, make: RowReader[T], /, **values: object) -> list[T]:
        """A named query's rows as domain objects, read on the event loop's own connection."""
        assert self._reader is not None, "store is not open"
        query = _QUERIES[name]
        return _objects(self._reader.execute(query.sql, query.args(values)), name, make)

    async def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        assert self._writer is not None, "store is not open"
        result: T = await self._writer.submit(op)
        return result

    async def _write_run(self, name: str, /, **values: object) -> int:
        """Run one named query in the writer; returns the number of rows it touched."""
        query = _QUERIES[name]
        args = query.args(values)
        return await self._write(lambda c: c.execute(query.sql, args).rowcount)

    # -- secrets --------------------------------------------------------------------------
    async def secret(self, name: str) -> bytes:
        def op(c: sqlite3.Connection) -> bytes:
            row = _row(c, "get_secret", name=name)
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
        return await self._write_run("revoke_api_key", now=now, id=key_id) > 0

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
        return await self._write_run("delete_registry_auth", user_id=user_id, id=auth_id) > 0

    async def update_registry_auth_credentials(
        self, user_id: str, auth_id: str, username: str, password: str
    ) -> bool:
        changed = await self._write_run(
            "update_registry_auth_credentials",
            user_id=user_id,
            id=auth_id,
            username=username,
            password=password,
        )
        return changed > 0

    async def get_pub_key(self, user_id: str) -> str | None:
        rows = self._query("get_user_pub_key", user_id=user_id)
        return str(rows[0]["pub_key"]) if rows else None

    async def set_pub_key(self, user_id: str, pub_key: str) -> None:
        await self._write_run("set_user_pub_key", user_id=user_id, pub_key=pub_key)

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
        return await self._write_run("delete_template", user_id=user_id, id=template_id) > 0

    # -- network volumes ------------------------------------------------------------------
    async def create_network_volume(self, user_id: str, volume: NetworkVolume) -> NetworkVolume:
        await self._write_run("create_network_volume", **network_volume_params(user_id, volume))
        return volume

    async def list_network_volumes(self, user_id: str) -> list[NetworkVolume]:
        rows = self._query("list_network_volumes", user_id=user_id)
        return [network_volume_from_row(r) for r in rows]

    async def all_network_volumes(self) -> list[tuple[str, NetworkVolume]]:
        rows = self._query("list_all_network_volumes")
        return [(r["user_id"], network_volume_from_row(r)) for r in rows]

    async def get_network_volume(self, user_id: str, volume_id: str) -> NetworkVolume | None:
        rows = self._query("get_network_volume", user_id=user_id, id=volume_id)
        return network_volume_from_row(rows[0]) if rows else None

    async def update_network_volume(
        self, user_id: str, volume_id: str, name: str, size: int
    ) -> NetworkVolume | None:
        def op(c: sqlite3.Connection) -> NetworkVolume | None:
            row = _row(
                c, "update_network_volume", name=name, size_gb=size, user_id=user_id, id=volume_id
            )
            if row is None:  # a shrink (left as it is), or no such volume
                row = _row(c, "get_network_volume", user_id=user_id, id=volume_id)
            return network_volume_from_row(row) if row else None

        return await self._write(op)

    async def delete_network_volume(self, user_id: str, volume_id: str) -> VolumeUsers | None:
        # One writer thread: nothing can name the volume between the check and the delete.
        def op(c: sqlite3.Connection) -> VolumeUsers | None:
            named = {"user_id": user_id, "volume_id": volume_id}
            endpoints = _rows(c, "endpoints_using_network_volume", **named)
            pods = _rows(c, "pods_using_network_volume", **named)
            users = VolumeUsers(
                endpoints=tuple(r["id"] for r in endpoints), pods=tuple(r["id"] for r in pods)
            )
            if users:
                return users
            deleted = _run(c, "delete_network_volume", user_id=user_id, id=volume_id).rowcount
            return VolumeUsers() if deleted else None

        return await self._write(op)

    async def endpoints_using_network_volume(self, user_id: str, volume_id: str) -> list[str]:
        rows = self._query("endpoints_using_network_volume", user_id=user_id, volume_id=volume_id)
        return [r["id"] for r in rows]

    # -- pods -----------------------------------------------------------------------------
    async def create_pod(self, pod: Pod) -> Pod:
        await self._write_run("create_pod", **pod_params(pod))
        return pod

    async def list_pods(self, user_id: str | None) -> list[Pod]:
        if user_id is None:
            return [pod_from_row(r) for r in self._query("list_all_pods")]
        return [pod_from_row(r) for r in self._query("list_pods_of_user", user_id=user_id)]

    async def get_pod(self, user_id: str, pod_id: str) -> Pod | None:
        rows = self._query("get_pod", user_id=user_id, id=pod_id)
        return pod_from_row(rows[0]) if rows else None

    async def update_pod_settings(self, pod: Pod) -> Pod | None:
        def op(c: sqlite3.Connection) -> Pod | None:
            row = _row(c, "update_pod_settings", **pod_settings_params(pod))
            return pod_from_row(row) if row else None

        return await self._write(op)

    async def set_pod_placement(
        self, pod_id: str, placement: PodPlacement, last_started_at: float | None
    ) -> Pod | None:
        def op(c: sqlite3.Connection) -> Pod | None:
            row = _row(
                c,
                "set_pod_placement",
                id=pod_id,
                placement=placement.model_dump_json(),
                last_started_at=last_started_at,
            )
            return pod_from_row(row) if row else None

        return await self._write(op)

    async def delete_pod(self, user_id: str, pod_id: str) -> bool:
        return await self._write_run("delete_pod", user_id=user_id, id=pod_id) > 0

    # -- usage ----------------------------------------------------------------------------
    async def open_usage(self, usage: Usage, subject: str, last_seen: float) -> bool:
        return await self._write_run("open_usage", **usage_params(usage, subject, last_seen)) > 0

    async def open_usages(self) -> list[tuple[str, Usage, float]]:
        return [
            (r["subject"], usage_from_row(r), r["last_seen"]) for r in self._query("open_usages")
        ]

    async def end_usage(self, subject: str, ended_at: float, gap: float) -> bool:
        ended = await self._write_run("end_usage", subject=subject, ended_at=ended_at, gap=gap)
        return ended > 0

    async def touch_usages(self, now: float) -> None:
        await self._write_run("touch_usages", now=now)

    async def end_unseen_usages(self, before: float) -> int:
        return await self._write_run("end_unseen_usages", before=before)

    async def usages_of(self, user_id: str, since: float, until: float) -> list[Usage]:
        rows = self._query("usages_of_user", user_id=user_id, since=since, until=until)
        return [usage_from_row(r) for r in rows]

    # -- endpoints ------------------------------------------------------------------------
    async def create_endpoint(self, endpoint: Endpoint) -> Endpoint:
        await self._write_run("create_endpoint", **endpoint_params(endpoint))
        return endpoint

    async def list_endpoints(self, user_id: str | None) -> list[Endpoint]:
        if user_id is None:
            rows = self._query("list_endpoints")
        else:
            rows = self._query("list_endpoints_of_user", user_id=user_id)
        return [endpoint_from_row(r) for r in rows]

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        rows = self._query("get_endpoint", id=endpoint_id)
        return endpoint_from_row(rows[0]) if rows else None

    async def update_endpoint(
        self, endpoint_id: str, spec: EndpointSpec, bump_version: bool
    ) -> Endpoint | None:
        def op(c: sqlite3.Connection) -> Endpoint | None:
            row = _row(
                c,
                "update_endpoint",
                spec=spec.model_dump_json(),
                template_id=spec.templateId,
                bump=int(bump_version),
                id=endpoint_id,
            )
            return endpoint_from_row(row) if row else None

        return await self._write(op)

    async def bump_endpoint_versions(self, template_id: str) -> list[str]:
        def op(c: sqlite3.Connection) -> list[str]:
            rows = _rows(c, "bump_endpoint_versions", template_id=template_id)
            return [r["id"] for r in rows]

        return await self._write(op)

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            _run(c, "delete_stream_chunks_of_endpoint", endpoint_id=endpoint_id)
            _run(c, "delete_jobs_of_endpoint", endpoint_id=endpoint_id)
            _run(c, "drop_lineups_of_endpoint", endpoint_id=endpoint_id)
            _run(c, "delete_workers_of_endpoint", endpoint_id=endpoint_id)
            _run(c, "unpublish_endpoint", endpoint_id=endpoint_id)
            return _run(c, "delete_endpoint", endpoint_id=endpoint_id).rowcount > 0

        return await self._write(op)

    async def endpoints_using_template(self, template_id: str) -> list[str]:
        rows = self._query("endpoints_using_template", template_id=template_id)
        return [r["id"] for r in rows]

    # -- jobs -----------------------------------------------------------------------------
    async def insert_job(self, job: Job) -> None:
        await self._write_run("insert_job", **job_params(job))

    async def get_job(self, endpoint_id: str, job_id: str) -> Job | None:
        jobs = self._query_as("get_job", job_from_row, id=job_id, endpoint_id=endpoint_id)
        return jobs[0] if jobs else None

    async def list_jobs(self, endpoint_id: str, limit: int, before_seq: int | None) -> list[Job]:
        if before_seq is None:
            return self._query_as("list_jobs", job_from_row, endpoint_id=endpoint_id, limit=limit)
        return self._query_as(
            "list_jobs_before",
            job_from_row,
            endpoint_id=endpoint_id,
            before_seq=before_seq,
            limit=limit,
        )

    async def set_job_ttl(self, endpoint_id: str, job_id: str, ttl_ms: int) -> Job | None:
        def op(c: sqlite3.Connection) -> Job | None:
            return _read_one(
                c, "set_job_ttl", job_from_row, ttl_ms=ttl_ms, id=job_id, endpoint_id=endpoint_id
            )

        return await self._write(op)

    async def claim_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        def op(c: sqlite3.Connection) -> list[Job]:
            jobs = _claim(c, "claim_jobs", endpoint_id, worker_id, limit, now, lease_until)
            if jobs:
                _run(c, "mark_worker_running", worker_id=worker_id)
            return jobs

        return await self._write(op)

    async def line_up_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        def op(c: sqlite3.Connection) -> list[Job]:
            jobs = _claim(c, "line_up_jobs", endpoint_id, worker_id, limit, now, lease_until)
            top = _rows(c, "lineup_top", worker_id=worker_id)[0]["top"]
            _run_many(
                c,
                "add_to_lineup",
                (
                    {"worker_id": worker_id, "pos": top + 1 + i, "job_id": job.id}
                    for i, job in enumerate(jobs)
                ),
            )
            return jobs

        return await self._write(op)

    async def record_progress(self, job_id: str, worker_id: str, output_json: str | None) -> bool:
        touched = await self._write_run(
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

        def op(c: sqlite3.Connection) -> Job | None:
            job = _read_one(c, "finish_job", job_from_row, **values)
            if job is None and worker_id is not None:
                if _row(c, "is_lined_up", worker_id=worker_id, job_id=job_id) is None:
                    return None
                _advance_lineup(c, worker_id, now, through=job_id)
                job = _read_one(c, "finish_job", job_from_row, **values)
            if job is None:
                return None
            _after_final(c, [job])
            if worker_id is not None:
                job.line_broken = _advance_lineup(c, worker_id, now)
                _let_go(c, worker_id, [job_id], now)
            return job

        return await self._write(op)

    async def cancel_job(self, endpoint_id: str, job_id: str, now: float) -> Job | None:
        def op(c: sqlite3.Connection) -> Job | None:
            before = _row(c, "job_before_cancel", id=job_id, endpoint_id=endpoint_id)
            if before is None:
                return None
            job = _read_one(c, "cancel_job", job_from_row, now=now, id=job_id)
            if job is None:
                return _read_one(c, "get_job_by_id", job_from_row, id=job_id)
            if before["status"] == JobStatus.IN_PROGRESS.value:
                _signal_stop(c, [(before["worker_id"], job_id)], "cancelled", now)
                job.stop_pending = True
            _after_final(c, [job])
            return job

        return await self._write(op)

    async def retry_job(self, endpoint_id: str, job_id: str) -> Job | None:
        def op(c: sqlite3.Connection) -> Job | None:
            job = _read_one(c, "retry_job", job_from_row, id=job_id, endpoint_id=endpoint_id)
            if job is not None:
                _run(c, "delete_stream_chunks", job_id=job_id)
                return job
            return _read_one(c, "get_job", job_from_row, id=job_id, endpoint_id=endpoint_id)

        return await self._write(op)

    async def purge_queue(self, endpoint_id: str) -> int:
        return await self._write_run("purge_queue", endpoint_id=endpoint_id)

    async def time_out_jobs(self, now: float) -> list[Job]:
        def op(c: sqlite3.Connection) -> list[Job]:
            jobs = _read(c, "time_out_jobs", job_from_row, now=now)
            _signal_stop(c, [(j.worker_id, j.id) for j in jobs], "timed out", now)
            _after_final(c, jobs)
            return jobs

        return await self._write(op)

    async def expire_jobs(self, now: float, limit: int) -> list[Job]:
        def op(c: sqlite3.Connection) -> list[Job]:
            jobs = _read(c, "expire_jobs", job_from_row, now=now, limit=limit)
            running = [(j.worker_id, j.id) for j in jobs if j.status is JobStatus.IN_PROGRESS]
            _signal_stop(c, running, "ttl expired", now)
            if jobs:
                _run(c, "delete_stream_chunks_of_jobs", job_ids=_ids([j.id for j in jobs]))
            return jobs

        return await self._write(op)

    async def job_counts(self, endpoint_id: str) -> JobCounts:
        counts = job_counts_from(self._query("job_counts", endpoint_id=endpoint_id))
        if not counts.in_queue_normal:
            return counts
        oldest = self._query("oldest_queued_at", endpoint_id=endpoint_id)
        return replace(counts, oldest_queued_at=oldest[0]["submitted_at"] if oldest else None)

    async def fold_job_counts(self) -> int:
        def op(c: sqlite3.Connection) -> int:
            top = _rows(c, "last_job_count_delta")[0]["top"]
            if top is None:
                return 0
            _run(c, "fold_job_counts", top=top)
            folded = _run(c, "delete_folded_job_count_deltas", top=top).rowcount
            _run(c, "delete_empty_job_counts")
            return int(folded)

        return await self._write(op)

    async def append_stream_chunks(
        self, job_id: str, worker_id: str, chunks: list[tuple[str, str | None]]
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            if not _run(c, "job_taken_by", job_id=job_id, worker_id=worker_id).fetchone():
                return False
            last = _rows(c, "last_stream_seq", job_id=job_id)[0]["seq"]
            _run_many(
                c,
                "add_stream_chunk",
                (
                    {"job_id": job_id, "seq": last + i, "output": out, "metrics": met}
                    for i, (out, met) in enumerate(chunks, start=1)
                ),
            )
            return True

        return await self._write(op)

    async def read_new_stream_chunks(self, job_id: str) -> list[StreamChunk]:
        def op(c: sqlite3.Connection) -> list[StreamChunk]:
            job = _row(c, "job_stream_cursor", job_id=job_id)
            if job is None:
                return []
            rows = _rows(c, "stream_chunks_after", job_id=job_id, cursor=job["stream_cursor"])
            if rows:
                _run(c, "set_stream_cursor", cursor=rows[-1]["seq"], job_id=job_id)
            return [stream_chunk_from_row(r) for r in rows]

        return await self._write(op)

    async def take_stop_signals(self, worker_id: str, now: float) -> list[str]:
        def op(c: sqlite3.Connection) -> list[str]:
            ids = sorted(r["job_id"] for r in _rows(c, "take_stop_signals", worker_id=worker_id))
            # Told to stop the job it ran, the worker starts its next lined-up one at once.
            if ids and _row(c, "worker_runs_a_job", worker_id=worker_id) is None:
                _advance_lineup(c, worker_id, now, told=frozenset(ids))
            return ids

        return await self._write(op)

    async def lineup_broken(self, worker_id: str) -> bool:
        return bool(self._query("lineup_broken", worker_id=worker_id))

    async def let_go_of_jobs(self, worker_id: str, job_ids: list[str] | None, now: float) -> None:
        def op(c: sqlite3.Connection) -> None:
            _let_go(c, worker_id, job_ids, now)

        await self._write(op)

    async def overdue_stop_workers(self, signalled_before: float) -> list[str]:
        rows = self._query("overdue_stop_workers", signalled_before=signalled_before)
        return [r["worker_id"] for r in rows]

    async def renew_leases(self, worker_id: str, job_ids: list[str], lease_until: float) -> None:
        def op(c: sqlite3.Connection) -> None:
            renewed = _run(
                c,
                "renew_leases",
                lease_until=lease_until,
                job_ids=_ids(job_ids),
                worker_id=worker_id,
            ).rowcount
            if renewed or any(
                _row(c, "is_lined_up", worker_id=worker_id, job_id=j) for j in job_ids
            ):
                _run(c, "renew_lineup_leases", lease_until=lease_until, worker_id=worker_id)

        await self._write(op)

    async def release_jobs(
        self, worker_id: str | None, now: float, max_attempts: int, reason: str
    ) -> list[Job]:
        def op(c: sqlite3.Connection) -> list[Job]:
            unlined = _unline(c, worker_id, now)
            if worker_id is None:
                failed = _read(
                    c,
                    "fail_jobs_of_lapsed_leases",
                    job_from_row,
                    reason=reason,
                    now=now,
                    max_attempts=max_attempts,
                )
                requeued = _read(c, "requeue_jobs_of_lapsed_leases", job_from_row, now=now)
            else:
                failed = _read(
                    c,
                    "fail_jobs_of_worker",
                    job_from_row,
                    reason=reason,
                    now=now,
                    worker_id=worker_id,
                    max_attempts=max_attempts,
                )
                requeued = _read(c, "requeue_jobs_of_worker", job_from_row, worker_id=worker_id)
            if requeued:
                ids = _ids([j.id for j in requeued])
                _run(c, "delete_stream_chunks_of_jobs", job_ids=ids)
            _after_final(c, failed)
            return failed + requeued + unlined

        return await self._write(op)

    # -- webhooks -------------------------------------------------------------------------
    async def webhook_secret(self, user_id: str, rotate: bool = False) -> str:
        def op(c: sqlite3.Connection) -> str:
            row = _row(c, "webhook_secret_of_user", user_id=user_id)
            if row is None:
                raise KeyError(user_id)
            if row["webhook_secret"] and not rotate:
                return str(row["webhook_secret"])
            secret = new_webhook_secret()
            _run(c, "set_webhook_secret", secret=secret, user_id=user_id)
            return secret

        return await self._write(op)

    async def due_webhook_deliveries(self, now: float, limit: int) -> list[WebhookDelivery]:
        rows = self._query("due_webhook_deliveries", now=now, limit=limit)
        return [webhook_delivery_from_row(r) for r in rows]

    async def webhook_deliveries_of(self, job_id: str) -> list[WebhookDelivery]:
        rows = self._query("webhook_deliveries_of", job_id=job_id)
        return [webhook_delivery_from_row(r) for r in rows]

    async def record_webhook_attempt(
        self,
        delivery_id: str,
        status: str,
        error: str | None,
        now: float,
        next_attempt_at: float | None,
    ) -> None:
        await self._write_run(
            "record_webhook_attempt",
            status=status,
            error=error,
            next_attempt_at=next_attempt_at,
            now=now,
            id=delivery_id,
        )

    # -- workers --------------------------------------------------------------------------
    async def save_worker(self, worker: Worker) -> None:
        await self._write_run("save_worker", **worker_params(worker))

    async def add_worker(self, worker: Worker) -> Worker:
        params = worker_params(worker)

        def op(c: sqlite3.Connection) -> Worker:
            _run(c, "add_worker", **params)
            [added] = _read(c, "get_worker", worker_from_row, id=worker.id)
            return added

        return await self._write(op)

    async def update_worker(self, worker_id: str, fields: Mapping[str, object]) -> Worker | None:
        query = _worker_update(tuple(fields))
        values = worker_field_values(fields)

        def op(c: sqlite3.Connection) -> Worker | None:
            if query is None:
                return _read_one(c, "get_worker", worker_from_row, id=worker_id)
            cursor = c.execute(query.sql, query.args({**values, "id": worker_id}))
            workers = _objects(cursor, "update_worker", worker_from_row)
            return workers[0] if workers else None

        return await self._write(op)

    async def touch_worker(self, worker_id: str, now: float) -> Worker | None:
        def op(c: sqlite3.Connection) -> Worker | None:
            return _read_one(c, "touch_worker", worker_from_row, now=now, id=worker_id)

        return await self._write(op)

    async def set_lb_demand(
        self, replica_id: str, endpoint_id: str, in_flight: int, waiting: int, now: float
    ) -> None:
        def op(c: sqlite3.Connection) -> None:
            if in_flight or waiting:
                _run(
                    c,
                    "set_lb_demand",
                    replica_id=replica_id,
                    endpoint_id=endpoint_id,
                    in_flight=in_flight,
                    waiting=waiting,
                    now=now,
                )
            else:
                _run(c, "clear_lb_demand", replica_id=replica_id, endpoint_id=endpoint_id)
            _run(c, "drop_stale_lb_demand", before=now - LB_DEMAND_KEPT_SECONDS)

        await self._write(op)

    async def lb_demand_of_others(
        self, replica_id: str, since: float
    ) -> dict[str, tuple[int, int]]:
        rows = self._query("lb_demand_of_others", replica_id=replica_id, since=since)
        return {r["endpoint_id"]: (int(r["in_flight"]), int(r["waiting"])) for r in rows}

    async def publish_model(self, model: PublicModel) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            return _run(c, "publish_model", **public_model_params(model)).rowcount > 0

        return await self._write(op)

    async def public_models(self) -> list[PublicModel]:
        return self._query_as("list_public_models", public_model_from_row)

    async def public_model(self, model_id: str) -> PublicModel | None:
        found = self._query_as("get_public_model", public_model_from_row, model_id=model_id)
        return found[0] if found else None

    async def unpublish_model(self, model_id: str) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            return _run(c, "unpublish_model", model_id=model_id).rowcount > 0

        return await self._write(op)

    async def worker_ready(self, worker_id: str, now: float) -> Worker | None:
        def op(c: sqlite3.Connection) -> Worker | None:
            return _read_one(c, "worker_ready", worker_from_row, now=now, id=worker_id)

        return await self._write(op)

    async def worker_serving(self, worker_id: str, busy: bool, now: float) -> Worker | None:
        state, idle_since = ("running", None) if busy else ("idle", now)

        def op(c: sqlite3.Connection) -> Worker | None:
            return _read_one(
                c,
                "worker_serving",
                worker_from_row,
                state=state,
                idle_since=idle_since,
                id=worker_id,
            )

        return await self._write(op)

    async def get_worker(self, worker_id: str) -> Worker | None:
        workers = self._query_as("get_worker", worker_from_row, id=worker_id)
        return workers[0] if workers else None

    async def list_workers(self, endpoint_id: str | None) -> list[Worker]:
        if endpoint_id is None:
            return self._query_as("list_workers", worker_from_row)
        return self._query_as("list_workers_of_endpoint", worker_from_row, endpoint_id=endpoint_id)

    async def delete_worker(self, worker_id: str) -> None:
        def op(c: sqlite3.Connection) -> None:
            _run(c, "delete_worker", worker_id=worker_id)
            _run(c, "delete_stop_signals_of_worker", worker_id=worker_id)
            _run(c, "drop_lineup", worker_id=worker_id)

        await self._write(op)

    async def jobs_of_worker(self, worker_id: str) -> list[str]:
        return [r["id"] for r in self._query("jobs_of_worker", worker_id=worker_id)]

    async def set_worker_failure(self, endpoint_id: str, failure_json: str | None) -> None:
        await self._write_run("set_worker_failure", failure=failure_json, endpoint_id=endpoint_id)

    async def worker_failure(self, endpoint_id: str) -> str | None:
        rows = self._query("worker_failure", endpoint_id=endpoint_id)
        return rows[0]["worker_failure"] if rows else None
