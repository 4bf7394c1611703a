"""The embedded default: one SQLite file in WAL mode, under the operations of
``operations.SqlStore``.

Writes go to one writer thread that takes every write waiting and commits them together
(group commit): under load many requests share one transaction, each in its own savepoint so
one failing operation does not undo the others. A caller's future resolves only after the
COMMIT, so a reply never gets ahead of durability. Point reads run on the event loop's own
connection: in WAL mode readers never wait for the writer, and a read is a few microseconds.

An operation is a coroutine over ``_SQLiteConnection``, whose methods run sqlite3 at once and
never suspend: the writer thread drives a write operation to its end in one ``send`` (inside
its savepoint), and a read runs on the event loop thread within the ``await``, as plain
functions would.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

import orjson

from skiff.datadir import FILE_MODE, create_private_file, make_private_dirs, tighten
from skiff.store.migration_scripts import migrations
from skiff.store.named_queries import Dialect, Query
from skiff.store.named_queries import load as load_queries
from skiff.store.operations import Connection, Op, SqlStore
from skiff.store.rows import RowReader
from skiff.store.sealing import KeySource, OneTimeKey

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
    for name, script in migrations(Dialect.SQLITE):
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations VALUES (?, strftime('%s','now'))", (name,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


class _Writer:
    """One thread, one connection, every write; batches whatever is waiting into one commit.

    Operations submitted during one turn of an event loop reach the thread together: the first
    one schedules a hand-over at the end of the turn, so under load the thread is woken (and
    contends for the GIL) once per turn, not once per operation."""

    def __init__(self, path: Path, keys: KeySource | None = None) -> None:
        self._path = path
        self._keys = keys if keys is not None else OneTimeKey()
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
        if len(batch) == 1:
            # Alone in its transaction (most writes when the load is light): the transaction
            # is its savepoint, and two statements fewer.
            _run_alone(conn, batch)
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op, _future, _loop in batch:
                conn.execute("SAVEPOINT op")
                try:
                    result = op(conn)
                except Exception as exc:
                    if not conn.in_transaction:
                        # SQLite rolled the whole transaction back itself (a full disk, an I/O
                        # error): every write of the batch is lost, and each is told why.
                        raise
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


def _run_alone(conn: sqlite3.Connection, batch: list[_Pending]) -> None:
    [(op, future, loop)] = batch
    outcome: _Outcome
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            outcome = (future, op(conn), None)
        except Exception as exc:
            if conn.in_transaction:  # else SQLite rolled it back itself (a full disk)
                conn.execute("ROLLBACK")
            outcome = (future, None, exc)
        else:
            conn.execute("COMMIT")
    except Exception as exc:  # the BEGIN or the COMMIT itself
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        outcome = (future, None, exc)
    settled: list[_Outcome] = [outcome]
    loop.call_soon_threadsafe(_settle_all, settled)


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
#: Per query read into domain objects, its rows' reader (rows.RowReader.for_columns).
_READERS: dict[str, Callable[[Any], Any]] = {}


def _columns(cursor: sqlite3.Cursor, name: str) -> tuple[str, ...]:
    columns = _COLUMNS.get(name)
    if columns is None:
        columns = _COLUMNS[name] = tuple(d[0] for d in cursor.description)
    return columns


class _SQLiteConnection:
    """``operations.Connection`` over a sqlite3 connection. Rows come as dicts by column name
    (the names kept per query: ``sqlite3.Row`` would compare names on every access); domain
    objects skip the dict: each column is found by name once per query."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _cursor(self, query: str | Query, values: Mapping[str, object]) -> sqlite3.Cursor:
        q = _QUERIES[query] if isinstance(query, str) else query
        return self.conn.execute(q.sql, q.args(values))

    async def execute(self, query: str | Query, /, **values: object) -> int:
        return self._cursor(query, values).rowcount

    async def execute_many(self, query: str, values: list[Mapping[str, object]]) -> None:
        q = _QUERIES[query]
        self.conn.executemany(q.sql, [q.args(v) for v in values])

    async def fetch(self, query: str | Query, /, **values: object) -> list[Any]:
        cursor = self._cursor(query, values)
        rows = cursor.fetchall()
        if not rows:
            return []
        columns = _columns(cursor, query if isinstance(query, str) else query.name)
        return [dict(zip(columns, row, strict=True)) for row in rows]

    async def fetchrow(self, query: str | Query, /, **values: object) -> Any:
        rows = await self.fetch(query, **values)
        return rows[0] if rows else None

    async def read(self, query: str | Query, make: RowReader[T], /, **values: object) -> list[T]:
        cursor = self._cursor(query, values)
        rows = cursor.fetchall()
        if not rows:
            return []
        name = query if isinstance(query, str) else query.name
        read = _READERS.get(name)
        if read is None:
            read = _READERS[name] = make.for_columns(_columns(cursor, name))
        return [read(row) for row in rows]

    async def read_one(
        self, query: str | Query, make: RowReader[T], /, **values: object
    ) -> T | None:
        objects = await self.read(query, make, **values)
        return objects[0] if objects else None

    def ids(self, ids: list[str] | None) -> object:
        """One JSON array, read with json_each."""
        return None if ids is None else orjson.dumps(ids).decode()


def _drive(operation: Coroutine[Any, Any, T]) -> T:
    """Run an operation over ``_SQLiteConnection`` to its end: it never suspends."""
    try:
        operation.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    operation.close()
    raise RuntimeError("a SQLite store operation awaited something besides its connection")


def _in_writer(op: Op[T]) -> Callable[[sqlite3.Connection], T]:
    def run(conn: sqlite3.Connection) -> T:
        return _drive(op(_SQLiteConnection(conn)))

    return run


class SQLiteStore(SqlStore):
    dialect = Dialect.SQLITE
    unique_violation = sqlite3.IntegrityError
    # SQLite's UPDATE ... RETURNING has no gate on the worker of its own.
    _claims_in_one_statement = False

    def __init__(self, path: Path, keys: KeySource | None = None) -> None:
        self._path = path
        self._keys = keys if keys is not None else OneTimeKey()
        self._writer: _Writer | None = None
        self._reads: _SQLiteConnection | None = None

    # -- lifecycle ----------------------------------------------------------------------
    async def _connect(self) -> list[str]:
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
        self._reads = _SQLiteConnection(_connect(self._path))
        return applied

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.stop()
            self._writer = None
        if self._reads is not None:
            self._reads.conn.close()
            self._reads = None

    # -- how operations run ---------------------------------------------------------------
    def _reader(self) -> Connection:
        """The event loop's own connection."""
        assert self._reads is not None, "store is not open"
        return self._reads

    async def _write(self, op: Op[T], *, snapshot: bool = False) -> T:
        # One writer: every transaction sees one snapshot, ``snapshot`` or not.
        assert self._writer is not None, "store is not open"
        result: T = await self._writer.submit(_in_writer(op))
        return result

    async def _write_one(self, op: Op[T]) -> T:
        return await self._write(op)

    async def _let_go(
        self, c: Connection, worker_id: str, job_ids: list[str] | None, now: float
    ) -> None:
        # One writer: nothing changes the worker's jobs between the two statements.
        await c.execute("forget_stop_signals", worker_id=worker_id, job_ids=c.ids(job_ids))
        await c.execute("idle_worker_if_free", worker_id=worker_id, now=now)
