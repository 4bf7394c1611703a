"""How the ``skiff serve`` replicas sharing one database find and wake each other.

One replica (the embedded SQLite default) needs nothing: ``LocalCluster``. Several replicas on
PostgreSQL use ``PostgresCluster``: NOTIFY carries wake-up keys between them, one session-level
advisory lock elects the leader that runs the singleton loops, and one lock per replica proves
it alive to the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from skiff.errors import SkiffError


class ClusterUnavailable(SkiffError):
    """The coordination connection is down (it reconnects by itself): the cluster cannot tell
    who is alive or leading right now, so callers must not conclude that others are dead."""

    status_code = 503


class Cluster(Protocol):
    #: Unique per process start, so a restarted replica is never mistaken for its predecessor.
    replica_id: str
    #: Longest a wait may sleep before re-checking the database: None with one replica (every
    #: wake-up is in-process), a couple of seconds with several (the safety net under NOTIFY).
    max_wait: float | None
    #: True when this replica is the only one there can be (SQLite): state worth sharing with
    #: other replicas (load-balancing demand) stays in memory.
    alone: bool

    async def start(
        self, on_keys: Callable[[list[str]], None], on_lost: Callable[[], None]
    ) -> None:
        """Connect, register this replica and begin receiving the keys other replicas publish.

        ``on_keys`` is called on the event loop with the keys another replica published (never
        with this replica's own); ``on_lost`` when coordination is lost: this replica no longer
        leads and the others now consider it dead (it reconnects by itself)."""
        ...

    async def close(self) -> None:
        """Release leadership, unregister this replica and close connections. Idempotent."""
        ...

    def publish(self, key: str) -> None:
        """Wake other replicas waiting on ``key``. Non-blocking and never raises: keys are
        batched and sent in the background; a failed send is logged and dropped (waits have
        the ``max_wait`` poll under them)."""
        ...

    @property
    def leading(self) -> bool:
        """Whether this replica holds the leader lock (as far as it knows without asking)."""
        ...

    async def campaign(self) -> bool:
        """Take the leader lock if free (never waits); returns whether this replica leads now.
        Cheap enough to call every second."""
        ...

    async def resign(self) -> None:
        """Give the leader lock up (at shutdown, before stopping the leader's loops)."""
        ...

    async def alive(self, replica_ids: Iterable[str]) -> set[str]:
        """Which of ``replica_ids`` belong to replicas alive right now."""
        ...

    async def peers(self) -> dict[str, str]:
        """Replica id -> url of every replica alive now, this one included."""
        ...

    async def hosts(self) -> dict[str, tuple[str, list[str]]]:
        """Replica id -> (url, the addresses of its host's interfaces as it published them) of
        every replica alive now, this one included."""
        ...

    async def readdress(self, addresses: Iterable[str]) -> None:
        """Publish ``addresses`` (this host's interfaces', as read now) in place of those the
        replica started with, when they differ: a host that gains an address is kept from the
        other replicas' webhooks too (``hosts``). ``ClusterUnavailable`` while coordination is
        down; reconnecting publishes the newest anyway."""
        ...

    async def leader(self) -> tuple[str, str] | None:
        """(replica id, url) of the replica holding the leader lock now, or None."""
        ...
