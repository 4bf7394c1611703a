"""The health check of load-balancing workers: ``GET /ping`` on each one's ``PORT_HEALTH``.

It runs on the leader, which started the workers. A starting worker becomes ready (idle) at
its first 200 and the requests waiting for one are woken; a 204 means "still initializing"
(a ready worker answering it is held out of rotation until it says 200 again). A ready worker
that fails a ping (an error status, a refused connection, no answer within
``PING_TIMEOUT_SECONDS``) is out of rotation at once; one whose connection is refused, or that
fails ``FAILURES_TO_REPLACE`` pings in a row, is stopped and recorded as the endpoint's worker
failure, and the scaler replaces it. A worker that never passes the check is ended by the
start-up deadline, as a queue worker that never calls in is.
"""

from __future__ import annotations

import asyncio
import logging

import httpx
from attrs import define, field

from skiff.domain.balancing import PingAnswer, ping_answer
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.balancer import Balancer
from skiff.services.fleet import Fleet
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers

log = logging.getLogger(__name__)

#: How long a ping may take before it counts as failed.
PING_TIMEOUT_SECONDS = 3.0
#: Failed pings in a row (other than a refused connection) before a worker is replaced.
FAILURES_TO_REPLACE = 3
#: The states in which a worker's ping is checked (a flashboot standby too: it is promoted
#: straight into rotation once it has passed one).
_CHECKED = (
    WorkerState.INITIALIZING,
    WorkerState.IDLE,
    WorkerState.RUNNING,
    WorkerState.STANDBY,
)


@define(eq=False, repr=False, slots=False)
class LbHealth:
    _workers: Workers
    _fleet: Fleet
    _balancer: Balancer
    _wakeups: Wakeups
    _interval: float
    _failures: dict[str, int] = field(init=False, factory=dict)
    _client: httpx.AsyncClient | None = field(init=False, default=None)
    _checks: set[asyncio.Task[None]] = field(init=False, factory=set)

    def __attrs_post_init__(self) -> None:
        self._balancer.on_suspect(self.suspect)

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            # Straight to the worker: no proxy from the environment, no redirects followed.
            self._client = httpx.AsyncClient(timeout=PING_TIMEOUT_SECONDS, trust_env=False)
        return self._client

    async def run(self) -> None:
        await self._wakeups.repeat(
            self.check_all, self._interval, "the load-balancing health check", log
        )

    async def check_all(self) -> None:
        """Ping every load-balancing worker this replica runs, all at once. One read of the
        worker records a pass: only load-balancing workers have a health address."""
        workers = await self._workers.all()
        await asyncio.gather(*(self.check(w) for w in workers if self._checked(w)))
        known = {w.id for w in workers}
        for worker_id in [w for w in self._failures if w not in known]:
            del self._failures[worker_id]

    def _checked(self, worker: Worker) -> bool:
        return (
            worker.kind is WorkerKind.LOCAL
            and worker.owner == self._workers.replica_id
            and worker.health_address is not None
            and worker.state in _CHECKED
        )

    def suspect(self, worker_id: str) -> None:
        """A request could not reach the worker: check it now rather than at the next pass."""
        task = asyncio.create_task(self._check_now(worker_id))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check_now(self, worker_id: str) -> None:
        worker = await self._workers.get(worker_id)
        if worker is not None and self._checked(worker):
            await self.check(worker)

    async def _ping(self, worker: Worker) -> tuple[int | None, str, bool]:
        """The status of ``GET /ping`` (None: no answer), what happened in words, and
        whether the connection was refused (nothing listens: the server in it is gone)."""
        try:
            response = await self.client.get(f"http://{worker.health_address}/ping")
        except httpx.ConnectError as exc:
            return None, f"its health port refused the connection ({exc})", True
        except httpx.TimeoutException:
            return None, f"GET /ping gave no answer within {PING_TIMEOUT_SECONDS:g} s", False
        except httpx.HTTPError as exc:
            return None, f"GET /ping failed ({exc!r})", False
        return response.status_code, f"GET /ping answered {response.status_code}", False

    async def check(self, worker: Worker) -> None:
        status, said, refused = await self._ping(worker)
        answer = ping_answer(status)
        if answer is PingAnswer.READY:
            self._failures.pop(worker.id, None)
            if worker.state is WorkerState.STANDBY:
                # Ready, held back: seen, so the start-up deadline spares it and a promotion
                # puts it straight into rotation.
                await self._workers.touch(worker)
            elif worker.state is WorkerState.INITIALIZING:
                if await self._workers.ready(worker.id) is not None:
                    self._balancer.changed(worker.endpoint_id)
            else:
                self._balancer.back_in_rotation(worker)
            return
        if worker.state in (WorkerState.INITIALIZING, WorkerState.STANDBY):
            return  # still coming up: the start-up deadline bounds how long
        self._balancer.out_of_rotation(worker)
        if answer is PingAnswer.STARTING:
            return  # it says it is not ready: held back until it says 200 again
        failures = self._failures.get(worker.id, 0) + 1
        self._failures[worker.id] = failures
        if refused or failures >= FAILURES_TO_REPLACE:
            self._failures.pop(worker.id, None)
            await self._fleet.end_with_failure(
                worker, f"it stopped answering its health check: {said}"
            )

    async def aclose(self) -> None:
        if self._checks:
            await asyncio.wait(set(self._checks), timeout=5)
        if self._client is not None:
            await self._client.aclose()
