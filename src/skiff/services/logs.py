"""The logs of the endpoints' workers: the one way in to them.

Where they live is said here only: ``DATA_DIR/logs/ENDPOINT/WORKER.log`` and its rotated
``.log.1`` … ``.log.N`` (format in ``domain/logs.py``). A provider never sees it: it writes a
worker's output into the sink ``WorkerLogs.sink`` opens (``LogSink``, providers/base.py), so the
workers of every provider log into the same place, the same format and the same rotation.

``WorkerLogs`` is this host's files (blocking: callers on the loop run it in a thread).
``EndpointLogs`` is an endpoint's logs as a client asks for them: which lines, from which
replicas, and how a follow goes on (``/v1/endpoints/{id}/logs`` parses and renders only).
``PodLogs`` is the same for pods' logs, kept under ``DATA_DIR/pod-logs/POD/POD.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from attrs import define, field, setters

from skiff.closing_stream import ClosingStream
from skiff.datadir import folders, make_private_dirs
from skiff.domain.log_pace import LogPace, PacesByUser
from skiff.domain.logs import (
    LogLine,
    LogQuery,
    log_name,
    safe_name,
    worker_names,
    worker_of_file,
)
from skiff.errors import NotFound
from skiff.services.follow_slots import FollowSlots
from skiff.services.log_reader import LogFollower, collect
from skiff.services.log_writer import (
    DEFAULT_LOG_BACKUPS,
    DEFAULT_LOG_BURST_BYTES,
    DEFAULT_LOG_MAX_BYTES,
    LogFile,
)
from skiff.services.peer_logs import PeerLogs
from skiff.services.wakeups import Wakeups
from skiff.store.base import Store

__all__ = ["EndpointLogs", "LogFollower", "LogLine", "PodLogs", "Relayed", "WorkerLogs"]

#: How often a followed log is read for new lines.
FOLLOW_POLL_SECONDS = 0.5
#: A quiet followed log sends an empty batch this often, so proxies keep the connection open.
FOLLOW_KEEPALIVE_SECONDS = 15.0
#: How many polls between two checks that the followed endpoint still exists.
FOLLOW_EXISTS_EVERY = 4


@define(eq=False, repr=False, slots=False)
class WorkerLogs:
    """The workers' logs on this host: where each lives, its writer, and its reading."""

    _data_dir: Path
    _max_bytes: int = DEFAULT_LOG_MAX_BYTES
    _backups: int = DEFAULT_LOG_BACKUPS
    #: Under ``data_dir``: ``logs`` for workers, ``pod-logs`` for pods, whose logs are kept the
    #: same way, one "endpoint" per pod.
    _folder: str = "logs"
    #: How fast each worker's (or pod's) output is copied, after ``burst_bytes`` at once
    #: (``domain/log_pace.py``); 0: as fast as it comes.
    _bytes_per_second: int = field(kw_only=True, default=0)
    _burst_bytes: int = field(kw_only=True, default=DEFAULT_LOG_BURST_BYTES)
    #: The pace each user's logs share, here and in any other ``WorkerLogs`` given the same
    #: (workers' and pods'); None: none.
    user_paces: PacesByUser | None = field(kw_only=True, default=None)
    _monotonic: Callable[[], float] = field(kw_only=True, default=time.monotonic)

    def __attrs_post_init__(self) -> None:
        self._root = self._data_dir / self._folder

    def beside(self, folder: str) -> WorkerLogs:
        """Logs kept as these are (caps, rotation, paces, each user's pace shared with these)
        in another ``folder`` of the data directory: the pods' beside the workers'."""
        return WorkerLogs(
            self._data_dir,
            self._max_bytes,
            self._backups,
            folder,
            bytes_per_second=self._bytes_per_second,
            burst_bytes=self._burst_bytes,
            user_paces=self.user_paces,
            monotonic=self._monotonic,
        )

    def log_dir(self, endpoint_id: str) -> Path:
        return self._root / endpoint_id

    def log_path(self, endpoint_id: str, worker_id: str) -> Path:
        return self.log_dir(endpoint_id) / log_name(worker_id)

    def sink(self, endpoint_id: str, worker_id: str, user_id: str | None = None) -> LogFile:
        """A new worker's log, opened for its provider to write into (``LogSinks``), paced
        on its own and with its user's other logs."""
        # The user's alone, like the data directory it is in (datadir.py).
        make_private_dirs(self.log_dir(endpoint_id))
        now = self._monotonic()
        paces: list[LogPace] = []
        if self._bytes_per_second > 0:
            paces.append(LogPace.full(self._bytes_per_second, self._burst_bytes, now))
        if user_id is not None and self.user_paces is not None:
            paces.append(self.user_paces.of(user_id, now))
        path = self.log_path(endpoint_id, worker_id)
        return LogFile(path, self._max_bytes, self._backups, tuple(paces), self._monotonic)

    def note(self, endpoint_id: str, worker_id: str, text: str, ts: float) -> None:
        """One line written into a worker's (or pod's) log by skiff itself."""
        log = self.sink(endpoint_id, worker_id)
        try:
            log.write([text.encode()], ts)
        finally:
            log.close()

    def endpoints(self) -> set[str]:
        """The ids of the endpoints (or pods) that have logs here."""
        return folders(self._root)

    def remove(self, endpoint_id: str) -> None:
        """Every log of the endpoint, rotated files included (it was deleted)."""
        shutil.rmtree(self.log_dir(endpoint_id), ignore_errors=True)

    def prune_ended(
        self,
        endpoint_ids: Collection[str],
        live: Collection[str],
        keep_bytes: int,
        keep_workers: int,
    ) -> list[str]:
        """Remove the logs of the ended workers (those not ``live``) of the endpoints, one
        user's, past the newest ``keep_bytes`` of them together, counting each worker's rotated
        files with it, or past the newest ``keep_workers`` of them; the newest ended worker's
        log is kept whatever its size. Each worker's log is capped, but workers that start and
        end over and over (a crash loop, ``refresh_worker``, a tenant on purpose, across as many
        endpoints as it likes) would otherwise fill the disk, and, with logs of a few lines
        each, make every later pruning read a folder of as many files. The ids of the workers
        whose logs went."""
        sizes: dict[str, int] = {}
        newest: dict[str, float] = {}
        files: dict[str, list[str]] = {}
        for endpoint_id in endpoint_ids:
            try:
                entries = list(os.scandir(self.log_dir(endpoint_id)))
            except OSError:
                continue
            for entry in entries:
                worker = worker_of_file(entry.name)
                if worker is None or worker in live:
                    continue
                try:
                    stat = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                sizes[worker] = sizes.get(worker, 0) + stat.st_size
                newest[worker] = max(newest.get(worker, 0.0), stat.st_mtime)
                files.setdefault(worker, []).append(entry.path)
        removed: list[str] = []
        kept = 0
        for i, worker in enumerate(sorted(sizes, key=newest.__getitem__, reverse=True)):
            kept += sizes[worker]
            if i == 0 or (kept <= keep_bytes and i < keep_workers):
                continue
            for path in files[worker]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            removed.append(worker)
        return removed

    def workers(self, endpoint_id: str) -> list[str]:
        """Ids of the workers of the endpoint that have a log, sorted."""
        if not safe_name(endpoint_id):
            return []
        try:
            return worker_names(os.listdir(self.log_dir(endpoint_id)))
        except OSError:
            return []

    def has_log(self, endpoint_id: str, worker_id: str) -> bool:
        return (
            safe_name(endpoint_id)
            and safe_name(worker_id)
            and self.log_path(endpoint_id, worker_id).is_file()
        )

    def read(
        self,
        endpoint_id: str,
        worker_id: str | None = None,
        since: float | None = None,
        tail: int | None = None,
    ) -> list[LogLine]:
        """Lines of one worker, or of every worker of the endpoint merged by time, oldest first.

        ``since`` keeps lines stamped at or after it (epoch seconds; unstamped lines, from
        before stamps existed, are left out); ``tail`` keeps the last N of what is left."""
        names = self._select(endpoint_id, worker_id)
        return collect(self.log_dir(endpoint_id), names, since, tail, {})

    def last_lines(self, endpoint_id: str, worker_id: str, n: int) -> list[str]:
        """The text of a worker's last ``n`` lines, e.g. to show why it ended."""
        return [line.line for line in self.read(endpoint_id, worker_id, tail=n)]

    def follow(self, endpoint_id: str, worker_id: str | None = None) -> LogFollower:
        """A follower positioned at the current end of the logs; close it when done."""
        if not safe_name(endpoint_id):
            return LogFollower(self.log_dir("-"), None, frozen=True)
        if worker_id is not None and not safe_name(worker_id):
            return LogFollower(self.log_dir(endpoint_id), worker_id, frozen=True)
        return LogFollower(self.log_dir(endpoint_id), worker_id)

    def _select(self, endpoint_id: str, worker_id: str | None) -> list[str]:
        if worker_id is None:
            return self.workers(endpoint_id)
        return [worker_id] if self.has_log(endpoint_id, worker_id) else []


@dataclass(frozen=True, slots=True)
class Relayed:
    """A followed log that another replica serves (the leader, which runs every current
    worker): its answer, passed on as it comes."""

    chunks: AsyncIterator[bytes]


#: A followed log from this replica: batches of new lines; the first is the backlog, and an
#: empty one means none came for a while (send something, so the connection stays open).
Batches = ClosingStream[list[LogLine]]
#: The same, as this replica makes them (before ``FollowSlots`` holds them).
_Made = AsyncGenerator[list[LogLine], None]


def _own_slots(slots: FollowSlots | None) -> FollowSlots:
    """The follow slots given, or slots of their own (``MAX_FOLLOWS_PER_USER`` a user)."""
    return slots or FollowSlots()


@define(eq=False, repr=False, slots=False, on_setattr=setters.NO_OP)
class EndpointLogs:
    """An endpoint's logs as a client asks for them. A worker's log is a file on the host of
    the replica that started it, so a replica answers with its own lines merged with every
    other live replica's (``PeerLogs``), and a follow is served by the leader. Asked on another
    replica's behalf (``local_only``), a replica answers from its own files only, so a request
    is never passed on twice."""

    files: WorkerLogs
    _peers: PeerLogs
    _store: Store
    _wakeups: Wakeups
    _slots: FollowSlots = field(default=None, converter=_own_slots)

    async def lines(
        self, query: LogQuery, *, local_only: bool, credentials: str | None
    ) -> list[LogLine]:
        """The last ``tail`` lines stamped at or after ``since`` (``WorkerLogs.read``) of every
        replica, merged by time; ``credentials`` (the caller's ``Authorization``) ask the
        others. Raises NotFound for a worker that has a log on no replica."""
        endpoint_id, worker = query.endpoint_id, query.worker
        here = worker is None or self.files.has_log(endpoint_id, worker)
        found = (
            await asyncio.to_thread(self.files.read, endpoint_id, worker, query.since, query.tail)
            if here
            else []
        )
        if not local_only:
            extra = await self._peers.lines(query, credentials)
            if extra:
                found = sorted(found + extra, key=_time)[-query.tail :]
        if worker is not None and not here and not found:
            raise _no_log(endpoint_id, worker)
        return found

    async def follow(
        self,
        user_id: str,
        query: LogQuery,
        *,
        local_only: bool,
        credentials: str | None,
        still_allowed: StillAllowed | None = None,
    ) -> Relayed | Batches:
        """The last ``tail`` lines, then new ones as they are written, until the caller stops
        reading, the endpoint is deleted, ``still_allowed`` says the caller may no longer read
        it or the server shuts down. From the leader when that is another replica (which asks
        the same of the caller's credentials); raises NotFound for a worker without a log
        here, TooManyRequests when the user follows the most logs here already
        (``FollowSlots``)."""
        self._slots.check(user_id)
        if not local_only:
            leader = await self._peers.leader_url()
            if leader is not None:
                relayed = await self._peers.follow(leader, query, credentials)
                return Relayed(self._slots.hold(user_id, relayed))
        endpoint_id, worker = query.endpoint_id, query.worker
        if worker is not None and not self.files.has_log(endpoint_id, worker):
            raise _no_log(endpoint_id, worker)
        follower = await asyncio.to_thread(self.files.follow, endpoint_id, worker)
        batches = self._batches(follower, endpoint_id, query.since, query.tail, still_allowed)
        return self._slots.hold(user_id, batches)

    async def _batches(
        self,
        follower: LogFollower,
        endpoint_id: str,
        since: float | None,
        tail: int,
        still_allowed: StillAllowed | None,
    ) -> _Made:
        async def gone() -> bool:
            return await self._store.get_endpoint(endpoint_id) is None

        async for batch in followed(follower, self._wakeups, since, tail, gone, still_allowed):
            yield batch


@define(eq=False, repr=False, slots=False, on_setattr=setters.NO_OP)
class PodLogs:
    """Pods' logs (kept like workers', one "endpoint" per pod, under ``pod-logs``): a pod runs
    on the leader, whose files these are."""

    files: WorkerLogs
    _store: Store
    _wakeups: Wakeups
    _slots: FollowSlots = field(default=None, converter=_own_slots)

    async def lines(self, pod_id: str, since: float | None, tail: int) -> list[LogLine]:
        return await asyncio.to_thread(self.files.read, pod_id, pod_id, since, tail)

    async def note(self, pod_id: str, text: str, ts: float) -> None:
        """A line of skiff's own in the pod's log (a session opened or closed), stamped ``ts``,
        beside its instance's output: appended, as that writer appends, so neither loses a
        line."""
        await asyncio.to_thread(self.files.note, pod_id, pod_id, text, ts)

    async def follow(
        self,
        user_id: str,
        pod_id: str,
        since: float | None,
        tail: int,
        still_allowed: StillAllowed | None = None,
    ) -> Batches:
        """The last ``tail`` lines, then new ones, until the caller stops reading, the pod is
        deleted, ``still_allowed`` says the caller may no longer read it or the server shuts
        down."""

        async def gone() -> bool:
            return await self._store.get_pod(user_id, pod_id) is None

        self._slots.check(user_id)
        follower = await asyncio.to_thread(self.files.follow, pod_id, pod_id)
        batches = followed(follower, self._wakeups, since, tail, gone, still_allowed)
        return self._slots.hold(user_id, batches)


async def followed(
    follower: LogFollower,
    wakeups: Wakeups,
    since: float | None,
    tail: int,
    gone: Callable[[], Awaitable[bool]],
    still_allowed: StillAllowed | None = None,
) -> _Made:
    """A follow's batches: the backlog at once, then what is written, until the server shuts
    down, ``gone`` says what the log belongs to is deleted (after its last lines) or
    ``still_allowed`` says its reader may no longer read it (nothing more is sent), both asked
    every ``FOLLOW_EXISTS_EVERY`` polls (2 seconds)."""
    # Closed by the caller when the client disconnects; the files close either way.
    with contextlib.closing(follower):
        # Always a batch at once, if an empty one, so a client sees the stream is open.
        yield await asyncio.to_thread(follower.backlog, since, tail)
        last_sent = time.monotonic()
        polls = 0
        while not wakeups.closing:
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
            polls += 1
            asking = polls % FOLLOW_EXISTS_EVERY == 0
            if asking and still_allowed is not None and not await still_allowed():
                break  # a key revoked, a user disabled: not a line more
            # Read once more after it is gone: its last lines.
            ended = asking and await gone()
            lines = await asyncio.to_thread(follower.poll)
            if since is not None:
                lines = [x for x in lines if x.time is not None and x.time >= since]
            if lines or time.monotonic() - last_sent >= FOLLOW_KEEPALIVE_SECONDS:
                yield lines
                last_sent = time.monotonic()
            if ended:
                break


#: Whether the caller who opened a follow may still read it (their key not revoked, their
#: user not disabled): the API's check of the request's credentials.
StillAllowed = Callable[[], Awaitable[bool]]


def _time(line: LogLine) -> float:
    # Unstamped lines first, as their missing time sorts before any other.
    return line.time if line.time is not None else -math.inf


def _no_log(endpoint_id: str, worker: str) -> NotFound:
    return NotFound(f"worker {worker} has no log on endpoint {endpoint_id}")
