"""How each load-balancing request ends, in process: the route (``api/lb.py``) with the real
proxy and balancer (on a SQLite store) in front of a worker that is a real socket server, and
the caller played by the test through ASGI ``receive`` and ``send`` (so it can leave at any
moment, which an HTTP client in process cannot). Whatever ends a request (its answer, its
caller leaving before or during it, a worker too slow, the server stopping), its connection to
the worker is closed or pooled, its lease given back and its in-flight slot freed.

The callers leaving a real server, and the cap over HTTP: ``tests/e2e/test_lb_callers_leaving.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from starlette.types import ASGIApp, Message

from eventually import eventually_async
from service_stubs import lb_endpoint as stub_lb_endpoint
from skiff.api import lb as lb_api
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain import permissions
from skiff.domain.endpoints import Endpoint
from skiff.domain.users import User
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.balancer import Balancer
from skiff.services.hub import Services
from skiff.services.lb_proxy import InFlight, LbProxy
from skiff.services.wakeups import Wakeups
from skiff.services.workers import Workers
from skiff.store.sqlite import SQLiteStore

T0 = 1_000.0
#: How long a test waits for something that should follow at once.
DEADLINE = 5.0


class MuteWorker:
    """A worker's HTTP server: ``/ok`` is answered at once, ``/drip`` with a head and one piece
    of a chunked body and then nothing, anything else not at all. It counts the connections to
    it that are open."""

    def __init__(self) -> None:
        self.open = 0
        self.opened = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.opened += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path == b"/ok":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                elif path == b"/drip":
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: 0\n\n\r\n"
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the proxy closed the connection
        finally:
            self.open -= 1
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class Caller:
    """One caller as the route sees it through ASGI: its request body (all at once, or a first
    piece and never the rest), and what it was sent; ``leave`` closes its connection."""

    def __init__(self, body: bytes = b"", complete: bool = True) -> None:
        self.body = body
        self.complete = complete
        self._body_sent = False
        self._left = asyncio.Event()
        self.sent: list[Message] = []

    def leave(self) -> None:
        self._left.set()

    async def receive(self) -> Message:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": self.body, "more_body": not self.complete}
        await self._left.wait()  # as a server says it once the connection is gone
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._left.set()  # answered: a server's receive says http.disconnect from now on

    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return int(starts[0]["status"]) if starts else None

    def body_sent(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


class _Auth:
    async def caller(self, _key: str) -> permissions.Caller:
        return permissions.Caller(User("u1", "u1", False, 0.0), permissions.ALL, "k1")

    def known_lb_key(self, endpoint_id: str) -> str | None:
        return None

    async def lb_key(self, endpoint_id: str) -> str:
        return f"key-of-{endpoint_id}"


@dataclass
class _Endpoints:
    endpoint: Endpoint

    async def for_jobs(self, _user: User, _endpoint_id: str) -> Endpoint:
        return self.endpoint


@dataclass
class _Metrics:
    codes: list[int] = field(default_factory=list)

    def lb_request(self, _endpoint_id: str, status: int, _seconds: float) -> None:
        self.codes.append(status)


@dataclass
class Rig:
    app: ASGIApp
    in_flight: InFlight
    balancer: Balancer
    worker: MuteWorker
    metrics: _Metrics
    #: The worker's record, as the balancer sees it.
    record: Worker

    def request(
        self, caller: Caller, path: str, method: str = "GET", length: int | None = None
    ) -> asyncio.Task[None]:
        headers = [(b"host", b"skiff.test"), (b"authorization", b"Bearer k")]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": f"/ep1{path}",
            "raw_path": f"/ep1{path}".encode(),
            "root_path": "",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 50_000),
            "server": ("127.0.0.1", 8000),
        }
        return asyncio.create_task(self.app(scope, caller.receive, caller.send))

    def settled(self) -> bool:
        """Nothing of any request left: no slot, no lease, no connection to the worker open."""
        return (
            self.in_flight.of("ep1") == 0
            and self.balancer.demand("ep1").in_flight == 0
            and self.worker.open == 0
        )


def lb_endpoint(execution_timeout_ms: int = 600_000) -> Endpoint:
    return stub_lb_endpoint(T0, executionTimeoutMs=execution_timeout_ms)


RigMaker = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def make_rig(tmp_path: Path) -> AsyncIterator[RigMaker]:
    store = SQLiteStore(tmp_path / "skiff.db")
    await store.open()
    made: list[tuple[Rig, LbProxy]] = []

    async def make(cap: int = 256, execution_timeout_ms: int = 600_000) -> Rig:
        worker = MuteWorker()
        port = await worker.start()
        clock = ManualClock()
        workers = Workers(store, clock)
        record = await workers.add(
            Worker(
                id="w1",
                endpoint_id="ep1",
                kind=WorkerKind.LOCAL,
                state=WorkerState.IDLE,
                version=1,
                started_at=T0,
                idle_since=T0,
                address=f"127.0.0.1:{port}",
                health_address=f"127.0.0.1:{port}",
            )
        )
        balancer = Balancer(workers, Wakeups(), wait_seconds=5, clock=clock)
        proxy = LbProxy(balancer)
        metrics = _Metrics()
        # What of the services the route uses: the proxy and balancer real, the rest stubs.
        services = SimpleNamespace(
            auth=_Auth(),
            endpoints=_Endpoints(lb_endpoint(execution_timeout_ms)),
            metrics=metrics,
            lb_proxy=proxy,
            settings=Settings(lb_max_in_flight=cap),
        )
        app = lb_api.build(cast(Services, services)).app
        route_app = app.routes[0].endpoint  # type: ignore[attr-defined]
        rig = Rig(app, route_app.in_flight, balancer, worker, metrics, record)
        made.append((rig, proxy))
        return rig

    yield make
    for rig, proxy in made:
        await proxy.aclose()
        await rig.balancer.aclose()
        await rig.worker.stop()
    await store.close()


async def test_an_answered_request_gives_its_slot_and_lease_back_and_pools_the_connection(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig()
    first, second = Caller(), Caller()

    await rig.request(first, "/ok")
    await rig.request(second, "/ok")

    assert (first.status(), first.body_sent()) == (200, b"ok")
    assert (second.status(), second.body_sent()) == (200, b"ok")
    assert rig.in_flight.of("ep1") == 0
    assert rig.balancer.demand("ep1").in_flight == 0
    assert rig.worker.opened == 1  # the second request reused the first one's connection


async def test_a_caller_leaving_before_the_answer_head_closes_the_connection_to_the_worker(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig()
    caller = Caller()
    task = rig.request(caller, "/never")
    await eventually_async(lambda: rig.worker.open == 1, "the request at the worker")

    caller.leave()
    await asyncio.wait_for(task, DEADLINE)  # ends quietly: nobody to answer

    await eventually_async(rig.settled, "the request's slot, lease and connection given back")
    assert caller.sent == []
    assert not task.cancelled()


async def test_a_caller_leaving_halfway_through_its_body_closes_the_connection_to_the_worker(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig()
    caller = Caller(body=b"x" * 10, complete=False)
    # Larger than what is read whole first: streamed to the worker as it comes.
    task = rig.request(caller, "/never", method="POST", length=lb_api.BUFFERED_BODY_BYTES + 1)
    await eventually_async(lambda: rig.worker.open == 1, "the request at the worker")

    caller.leave()
    await asyncio.wait_for(task, DEADLINE)

    await eventually_async(rig.settled, "the request's slot, lease and connection given back")
    assert caller.sent == []


async def test_a_small_body_is_read_whole_before_a_worker_is_troubled(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig()
    caller = Caller(body=b"x" * 10, complete=False)
    task = rig.request(caller, "/never", method="POST", length=lb_api.BUFFERED_BODY_BYTES)
    await eventually_async(lambda: rig.in_flight.of("ep1") == 1, "the request taken in")
    await asyncio.sleep(0.05)  # were it streamed, the worker would have its connection by now
    assert rig.worker.open == 0

    caller.leave()
    await asyncio.wait_for(task, DEADLINE)

    await eventually_async(rig.settled, "the request's slot, lease and connection given back")
    assert caller.sent == [] and rig.worker.open == 0


async def test_a_caller_leaving_in_the_middle_of_the_answer_closes_the_connection_to_the_worker(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig()
    caller = Caller()
    task = rig.request(caller, "/drip")
    await eventually_async(
        lambda: caller.body_sent() == b"data: 0\n\n", "the first piece of the answer"
    )

    caller.leave()
    await asyncio.wait_for(task, DEADLINE)

    await eventually_async(rig.settled, "the request's slot, lease and connection given back")
    assert caller.status() == 200


async def test_a_caller_leaving_while_waiting_for_a_worker_stops_waiting(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig()
    rig.balancer.out_of_rotation(rig.record)  # none ready
    caller = Caller()
    task = rig.request(caller, "/ok")
    await eventually_async(lambda: rig.balancer.demand("ep1").waiting == 1, "the request waiting")

    caller.leave()
    await asyncio.wait_for(task, DEADLINE)

    assert rig.balancer.demand("ep1").waiting == 0
    assert rig.in_flight.of("ep1") == 0
    assert caller.sent == []


async def test_a_worker_too_slow_for_the_execution_timeout_is_a_502_that_gives_its_slot_back(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig(execution_timeout_ms=200)
    caller = Caller()

    await asyncio.wait_for(rig.request(caller, "/never"), DEADLINE)

    assert caller.status() == 502
    assert "did not answer within 0.2 s" in json.loads(caller.body_sent())["error"]
    await eventually_async(rig.settled, "the request's slot, lease and connection given back")


async def test_the_server_stopping_cancels_the_request_and_gives_its_slot_back(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig()
    caller = Caller()
    task = rig.request(caller, "/never")
    await eventually_async(lambda: rig.worker.open == 1, "the request at the worker")

    task.cancel()  # not the caller leaving: the cancellation goes on

    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually_async(rig.settled, "the request's slot, lease and connection given back")


async def test_over_the_cap_a_request_is_a_503_with_retry_after_and_a_freed_slot_is_reused(
    make_rig: RigMaker,
) -> None:
    rig = await make_rig(cap=2)
    held = [Caller(), Caller()]
    tasks = [rig.request(caller, "/never") for caller in held]
    await eventually_async(lambda: rig.worker.open == 2, "two requests at the worker")
    over = Caller()

    await rig.request(over, "/ok")

    assert over.status() == 503
    start = over.sent[0]
    assert (b"retry-after", b"5") in start["headers"]
    error = json.loads(over.body_sent())["error"]
    assert "too many requests in flight" in error and "SKIFF_LB_MAX_IN_FLIGHT" in error
    assert rig.metrics.codes == [503]
    assert rig.in_flight.of("ep1") == 2

    held[0].leave()
    await asyncio.wait_for(tasks[0], DEADLINE)
    after = Caller()
    await rig.request(after, "/ok")

    assert after.status() == 200
    held[1].leave()
    await asyncio.wait_for(tasks[1], DEADLINE)
    # The answered request's connection stays, pooled for the next.
    await eventually_async(lambda: rig.worker.open == 1, "the held requests' connections closed")
    assert rig.in_flight.of("ep1") == 0
    assert rig.balancer.demand("ep1").in_flight == 0
