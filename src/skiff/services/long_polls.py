"""How many long-polls (``job-take``, ``job-stop``) a worker, and all the workers of one user,
may hold open on a replica at once.

A long-poll holds a connection for up to ``SKIFF_TAKE_WAIT_SECONDS``. The runpod SDK's worker
holds one take and one stop-poll at a time; a worker that is not the SDK (its code is its
user's) could open thousands, until the server refused every new connection, other tenants'
included. With the bound, a poll past it is answered 429 at once, and the SDK waits before it
asks again.
"""

from __future__ import annotations

from types import TracebackType

from skiff.errors import TooManyRequests

#: Long-polls one worker id holds at once on one replica: the SDK holds at most two (a take
#: and a stop-poll); the rest is room for a retry racing the end of the last one.
MAX_POLLS_PER_WORKER = 4
#: Long-polls the workers of one user's endpoints hold at once on one replica.
MAX_POLLS_PER_USER = 1024
#: What a refused worker is told to wait.
RETRY_AFTER_SECONDS = 1


class LongPolls:
    def __init__(
        self, per_worker: int = MAX_POLLS_PER_WORKER, per_user: int = MAX_POLLS_PER_USER
    ) -> None:
        self._per_worker = per_worker
        self._per_user = per_user
        #: endpoint/worker id -> long-polls it holds; user id -> those their workers hold.
        self._workers: dict[str, int] = {}
        self._users: dict[str, int] = {}

    def held_by(self, user_id: str) -> int:
        return self._users.get(user_id, 0)

    def hold(self, user_id: str, endpoint_id: str, worker_id: str) -> _Held:
        """``with`` it around a long-poll: refused (429) past either bound. A worker is counted
        by its endpoint and name: names are each endpoint's own (``Workers.seen``), and a poll
        naming another endpoint's worker must not use up that worker's room."""
        worker_key = f"{endpoint_id}/{worker_id}"
        if self._workers.get(worker_key, 0) >= self._per_worker:
            raise TooManyRequests(
                f"worker {worker_id} holds {self._per_worker} long-polls on this server "
                "already, the most at once",
                RETRY_AFTER_SECONDS,
            )
        if self._users.get(user_id, 0) >= self._per_user:
            raise TooManyRequests(
                f"the workers of this endpoint's owner hold {self._per_user} long-polls on this "
                "server already, the most at once",
                RETRY_AFTER_SECONDS,
            )
        return _Held(self, user_id, worker_key)


class _Held:
    """A plain class rather than ``@contextmanager``: every take enters it."""

    __slots__ = ("_polls", "_user_id", "_worker_id")

    def __init__(self, polls: LongPolls, user_id: str, worker_id: str) -> None:
        self._polls = polls
        self._user_id = user_id
        self._worker_id = worker_id

    def __enter__(self) -> None:
        _add(self._polls._workers, self._worker_id, 1)
        _add(self._polls._users, self._user_id, 1)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _add(self._polls._workers, self._worker_id, -1)
        _add(self._polls._users, self._user_id, -1)


def _add(counts: dict[str, int], key: str, change: int) -> None:
    left = counts.get(key, 0) + change
    if left:
        counts[key] = left
    else:
        del counts[key]
