"""Replicas sharing one PostgreSQL database: NOTIFY for wake-ups, advisory locks for leadership
and liveness.

Each replica keeps one dedicated connection (not pooled: session-level locks and LISTEN belong
to a session) on which it holds its own liveness lock for as long as the session lives. The
server releases a dead session's locks, so "alive" is exactly "its lock is held", with no
heartbeats to tune. Lock keys and the channel derive from the schema, because several skiff
schemas may share one database while advisory locks and channels are database-wide.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from skiff.cluster.base import ClusterUnavailable

log = logging.getLogger(__name__)

#: NOTIFY refuses payloads of 8000 bytes or more; keep a margin.
_PAYLOAD_LIMIT = 7900
_BACKOFF_MIN = 0.2
_BACKOFF_MAX = 5.0
#: How often the leader deletes the rows of replicas that are gone.
_PRUNE_EVERY = 30.0
#: How often a leader makes a round trip to prove its session (and so its lock) still exists:
#: the termination listener does not fire when the network silently drops.
_CHECK_EVERY = 10.0
#: Every statement is short; one that hangs means the connection is gone.
_COMMAND_TIMEOUT = 10.0
#: Per-session settings so the server notices a vanished replica (and frees its locks) in about
#: 25 s rather than after the kernel's two-hour default.
_KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    # Keepalive probes are not sent while unacknowledged data waits (a NOTIFY to a vanished
    # host); this bounds that case too, so the server frees a dead leader's locks in seconds.
    "tcp_user_timeout": "25000",
}


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _held(alias: str, key1: str, key2: str) -> str:
    """SQL: pg_locks row ``alias`` is the granted advisory lock (key1, key2) in this database.

    The two-int4 form shows its keys as ``classid``/``objid`` (type oid, unsigned 32-bit) with
    ``objsubid = 2``; a negative int4 such as most hashtext values reads there as itself plus
    2**32, hence the mask."""
    return (
        f"{alias}.locktype = 'advisory' AND {alias}.granted AND {alias}.objsubid = 2"
        f" AND {alias}.database = (SELECT oid FROM pg_database"
        " WHERE datname = current_database())"
        f" AND {alias}.classid::bigint = (({key1})::bigint & 4294967295)"
        f" AND {alias}.objid::bigint = (({key2})::bigint & 4294967295)"
    )


# $1 is always the namespace key of the liveness locks (or of the leader lock for _LEADER_SQL).
_ALIVE_SQL = (
    "SELECT t.id FROM unnest($2::text[]) AS t(id) WHERE EXISTS"
    f" (SELECT 1 FROM pg_locks l WHERE {_held('l', '$1::int4', 'hashtext(t.id)')})"
)
_HOSTS_SQL = (
    "SELECT r.id, r.url, r.addresses FROM replicas r WHERE EXISTS"
    f" (SELECT 1 FROM pg_locks l WHERE {_held('l', '$1::int4', 'hashtext(r.id)')})"
)
_PRUNE_SQL = (
    "DELETE FROM replicas r WHERE NOT EXISTS"
    f" (SELECT 1 FROM pg_locks l WHERE {_held('l', '$1::int4', 'hashtext(r.id)')})"
)
# The session holding the leader lock, matched to its row; the row must also be the one whose
# liveness lock that session holds, so a stale row that reused a backend pid never matches.
_LEADER_SQL = (
    "SELECT r.id, r.url FROM pg_locks l JOIN replicas r ON r.session = l.pid::text"
    f" WHERE {_held('l', '$1::int4', '1')} AND EXISTS (SELECT 1 FROM pg_locks m"
    f" WHERE m.pid = l.pid AND {_held('m', '$2::int4', 'hashtext(r.id)')}) LIMIT 1"
)
_REGISTER_SQL = (
    "INSERT INTO replicas (id, url, hostname, started_at, session, addresses)"
    " VALUES ($1, $2, $3, $4, pg_backend_pid()::text, $5) ON CONFLICT (id) DO UPDATE"
    " SET url = EXCLUDED.url, hostname = EXCLUDED.hostname, session = EXCLUDED.session,"
    " addresses = EXCLUDED.addresses"
)
_READDRESS_SQL = "UPDATE replicas SET addresses = $2 WHERE id = $1"
# Ends this replica's own previous session, still holding its liveness lock after a network
# drop the server has not noticed yet: the row names that session as ours.
_EVICT_SQL = (
    "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN replicas r"
    f" ON r.session = l.pid::text WHERE r.id = $2 AND {_held('l', '$1::int4', 'hashtext($2)')}"
)


class PostgresCluster:
    """Coordination of the replicas serving one schema of one PostgreSQL database.

    While the connection is down (it reconnects by itself) ``publish`` drops keys, ``campaign``
    returns False, and ``alive``/``peers``/``leader`` raise ``ClusterUnavailable`` rather than
    guess: an empty answer would make callers declare live replicas dead.
    """

    alone = False

    def __init__(
        self,
        dsn: str,
        schema: str | None,
        url: str,
        hostname: str | None = None,
        *,
        max_wait: float = 2.0,
        replica_id: str | None = None,
        addresses: Iterable[str] = (),
    ) -> None:
        self.replica_id = replica_id or secrets.token_hex(6)
        self.max_wait: float | None = max_wait
        self.url = url
        self.hostname = hostname or socket.gethostname()
        #: This host's interfaces' addresses, published with the replica's row (``hosts``).
        self.addresses = list(addresses)
        #: The addresses the row holds now (None: not registered yet).
        self._published: list[str] | None = None
        self._dsn = dsn
        self._schema = schema
        namespace = schema or "public"
        self._leader_name = f"skiff:{namespace}"
        self._replica_name = f"skiff-replica:{namespace}"
        self._channel = "skiff_" + hashlib.sha1(namespace.encode()).hexdigest()[:16]
        # Filled from the server (hashtext) on the first connection.
        self._leader_key = 0
        self._replica_key = 0
        self._started_at = 0.0
        self._conn: Any = None
        # asyncpg refuses concurrent operations on one connection.
        self._lock = asyncio.Lock()
        self._leading = False
        self._closed = False
        self._on_keys: Callable[[list[str]], None] = lambda keys: None
        self._on_lost: Callable[[], None] = lambda: None
        self._pending: dict[str, None] = {}  # ordered and deduplicated
        self._wake = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._reconnector: asyncio.Task[None] | None = None
        self._drop_logged = False
        self._checked_at = 0.0
        self._pruned_at = 0.0

    # -- lifecycle ----------------------------------------------------------------------
    async def start(
        self, on_keys: Callable[[list[str]], None], on_lost: Callable[[], None]
    ) -> None:
        if self._conn is not None or self._sender is not None or self._closed:
            raise RuntimeError("a cluster is started once")
        # Set before LISTEN: a notification may arrive as soon as it is issued.
        self._on_keys, self._on_lost = on_keys, on_lost
        self._started_at = time.time()
        self._conn = await self._connect(reconnect=False)
        self._sender = asyncio.get_running_loop().create_task(
            self._send_loop(), name=f"cluster-publish-{self.replica_id}"
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._reconnector, self._sender) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            # wait() neither raises their cancellation nor swallows one of close() itself.
            await asyncio.wait(tasks)
        await self._flush()
        conn, self._conn = self._conn, None
        self._leading = False
        if conn is None:
            return
        try:
            async with self._lock:
                await conn.execute("DELETE FROM replicas WHERE id = $1", self.replica_id)
                # Ending the session releases the leader and liveness locks with it.
                await conn.close(timeout=_COMMAND_TIMEOUT)
        except Exception as exc:
            log.warning("cluster: closing replica %s uncleanly: %s", self.replica_id, exc)
            conn.terminate()

    async def _connect(self, *, reconnect: bool) -> Any:
        """A connection set up for coordination: liveness lock held, row registered, LISTENing
        and watched for termination."""
        settings = dict(_KEEPALIVES)
        if self._schema is not None:
            settings["search_path"] = _quote_ident(self._schema)
        conn = await asyncpg.connect(
            self._dsn,
            server_settings=settings,
            timeout=_COMMAND_TIMEOUT,
            command_timeout=_COMMAND_TIMEOUT,
        )
        try:
            row = await conn.fetchrow(
                "SELECT hashtext($1), hashtext($2),"
                " pg_try_advisory_lock(hashtext($2), hashtext($3))",
                self._leader_name,
                self._replica_name,
                self.replica_id,
            )
            self._leader_key, self._replica_key = row[0], row[1]
            if not row[2]:
                if reconnect:
                    await conn.execute(_EVICT_SQL, self._replica_key, self.replica_id)
                    raise ClusterUnavailable(
                        "the previous session of this replica still held its lock; ended it"
                    )
                raise ClusterUnavailable(
                    f"replica id {self.replica_id!r} is in use by another live replica"
                )
            # What this registers, as it was read: a readdress while it runs (refused, the
            # connection not being up yet) finds the row behind and writes its own next round.
            registered = list(self.addresses)
            await conn.execute(
                _REGISTER_SQL,
                self.replica_id,
                self.url,
                self.hostname,
                self._started_at,
                " ".join(registered),
            )
            self._published = registered
            await conn.add_listener(self._channel, self._on_notify)
            conn.add_termination_listener(self._on_terminated)
            if conn.is_closed():
                # Lost before the listener was in place: it will never fire.
                raise ClusterUnavailable("the connection closed while being set up")
        except BaseException:
            conn.terminate()
            raise
        return conn

    def _on_terminated(self, conn: Any) -> None:
        self._lose(conn, "connection closed")

    def _lose(self, conn: Any, why: str) -> None:
        """Coordination through ``conn`` is over: stop leading, tell the owner once, reconnect
        in the background. Ignores connections already given up (or closed on purpose)."""
        if conn is not self._conn:
            return
        self._conn = None
        self._leading = False
        self._pending.clear()
        # A session that misbehaved may still hold locks; ending it frees them for the others.
        if not conn.is_closed():
            conn.terminate()
        if self._closed:
            return
        log.warning("cluster: replica %s lost coordination (%s)", self.replica_id, why)
        self._drop_logged = False
        try:
            self._on_lost()
        except Exception:
            log.exception("cluster: on_lost callback failed")
        self._reconnector = asyncio.get_running_loop().create_task(
            self._reconnect(), name=f"cluster-reconnect-{self.replica_id}"
        )

    async def _reconnect(self) -> None:
        delay = _BACKOFF_MIN
        while True:
            await asyncio.sleep(delay)
            try:
                conn = await self._connect(reconnect=True)
            except Exception as exc:
                delay = min(delay * 2, _BACKOFF_MAX)
                log.warning(
                    "cluster: replica %s cannot reconnect yet (%s); retrying in %.1f s",
                    self.replica_id,
                    exc,
                    delay,
                )
                continue
            # No await since _connect returned: its termination listener cannot have run.
            self._conn = conn
            log.info("cluster: replica %s reconnected", self.replica_id)
            return

    # -- notifications --------------------------------------------------------------------
    def publish(self, key: str) -> None:
        if self._closed or self._sender is None:
            return
        if self._conn is None:
            if not self._drop_logged:
                log.warning(
                    "cluster: replica %s is disconnected; dropping published keys until it"
                    " reconnects",
                    self.replica_id,
                )
                self._drop_logged = True
            return
        self._pending[key] = None
        # The sender wakes in a later loop iteration, after everything published in this one.
        self._wake.set()

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        """Send the pending keys in as few NOTIFYs as fit, in one round trip."""
        keys = list(self._pending)
        self._pending.clear()
        conn = self._conn
        if not keys or conn is None:
            return
        payloads = self._payloads(keys)
        try:
            async with self._lock:
                if conn is self._conn and payloads:
                    await conn.execute(
                        "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p",
                        self._channel,
                        payloads,
                    )
        except Exception as exc:
            self._lose(conn, f"publishing failed: {exc!r}")

    def _payloads(self, keys: list[str]) -> list[str]:
        """``<replica id>\\n<key>\\n<key>...`` chunks of under ``_PAYLOAD_LIMIT`` bytes."""
        head = self.replica_id
        head_size = len(head.encode())
        payloads: list[str] = []
        lines, size = [head], head_size
        for key in keys:
            n = len(key.encode()) + 1
            if "\n" in key or head_size + n >= _PAYLOAD_LIMIT:
                log.warning("cluster: cannot publish key %.80r (newline or too long)", key)
                continue
            if size + n >= _PAYLOAD_LIMIT:
                payloads.append("\n".join(lines))
                lines, size = [head], head_size
            lines.append(key)
            size += n
        if len(lines) > 1:
            payloads.append("\n".join(lines))
        return payloads

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        sender, _, rest = payload.partition("\n")
        if sender == self.replica_id or not rest:
            return
        try:
            self._on_keys(rest.split("\n"))
        except Exception:
            log.exception("cluster: on_keys callback failed")

    # -- leadership -----------------------------------------------------------------------
    @property
    def leading(self) -> bool:
        return self._leading

    async def campaign(self) -> bool:
        conn = self._conn
        if conn is None:
            return False
        now = time.monotonic()
        # A session-level lock stays held while the session lives, and the termination
        # listener reports a closed session: a leader only re-checks now and then.
        if self._leading and now - self._checked_at < _CHECK_EVERY:
            return True
        try:
            async with self._lock:
                if conn is not self._conn:
                    return False
                if not self._leading:
                    got = await conn.fetchval(
                        "SELECT pg_try_advisory_lock($1, 1)", self._leader_key
                    )
                    if conn is not self._conn:
                        return False
                    self._leading = bool(got)
                    if not self._leading:
                        return False
                elif now - self._pruned_at < _PRUNE_EVERY:
                    await conn.execute("SELECT 1")
                if now - self._pruned_at >= _PRUNE_EVERY:
                    await conn.execute(_PRUNE_SQL, self._replica_key)
                    self._pruned_at = now
                self._checked_at = now
        except Exception as exc:
            self._lose(conn, f"campaign failed: {exc!r}")
            return False
        return self._leading

    async def resign(self) -> None:
        conn = self._conn
        was_leading, self._leading = self._leading, False
        if not was_leading or conn is None:
            return
        try:
            async with self._lock:
                if conn is self._conn:
                    await conn.fetchval("SELECT pg_advisory_unlock($1, 1)", self._leader_key)
        except Exception as exc:
            # Ending the session releases the lock all the same.
            self._lose(conn, f"resigning failed: {exc!r}")

    # -- membership -----------------------------------------------------------------------
    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        conn = self._conn
        if conn is None:
            raise ClusterUnavailable("the cluster connection is down (reconnecting)")
        try:
            async with self._lock:
                if conn is not self._conn:
                    raise ClusterUnavailable("the cluster connection is down (reconnecting)")
                rows: list[Any] = await conn.fetch(sql, *args)
                return rows
        except ClusterUnavailable:
            raise
        except Exception as exc:
            self._lose(conn, f"query failed: {exc!r}")
            raise ClusterUnavailable(f"the cluster connection failed: {exc}") from exc

    async def alive(self, replica_ids: Iterable[str]) -> set[str]:
        ids = list(set(replica_ids))
        if not ids:
            return set()
        return {r[0] for r in await self._fetch(_ALIVE_SQL, self._replica_key, ids)}

    async def peers(self) -> dict[str, str]:
        return {replica: url for replica, (url, _) in (await self.hosts()).items()}

    async def hosts(self) -> dict[str, tuple[str, list[str]]]:
        rows = await self._fetch(_HOSTS_SQL, self._replica_key)
        return {r[0]: (r[1], r[2].split()) for r in rows}

    async def readdress(self, addresses: Iterable[str]) -> None:
        # Kept first: a reconnect registers the newest list even if the update below fails.
        self.addresses = list(addresses)
        if self.addresses == self._published:
            return
        await self._fetch(_READDRESS_SQL, self.replica_id, " ".join(self.addresses))
        self._published = list(self.addresses)

    async def leader(self) -> tuple[str, str] | None:
        rows = await self._fetch(_LEADER_SQL, self._leader_key, self._replica_key)
        return (rows[0][0], rows[0][1]) if rows else None
