"""Load-balancing requests whose callers leave, and the cap on requests in flight, against the
real server and a real worker that passes ``/ping`` but never finishes an answer
(``tests/e2e/workers/lb_mute_worker.py``).

The issue these pin: 600 callers that gave up on such a worker left 601 sockets to it open for
the endpoint's ``executionTimeoutMs`` (10 minutes), and the server's open files went from 38 to
640. A caller here gives up by closing its connection, once the test has seen its request reach
the worker (so nothing depends on how fast the machine is); the worker counts the connections
to it still open, and the server's open files are read from ``/proc``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import Server, running

from skiff.api.lb import BUFFERED_BODY_BYTES

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="reads open files from /proc"
)

#: What the worker prints once it listens, before its port (``lb_mute_worker.LISTENING``).
LISTENING = "lb mute worker listening on "
#: The cap the server runs with: the callers of the first test fit under it exactly.
CAP = 50
#: Open files the server may hold beyond its count before the callers came (a database or
#: health-check connection opened meanwhile), none of them the callers'.
SLACK = 8


@pytest.fixture(scope="module", params=["fast", "plain"])
def lb_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """Served by skiff's own HTTP protocol (api/lean_http.py, which hands these requests to
    uvicorn's request cycle) and by uvicorn's plain one (``SKIFF_FAST_HTTP=0``): the caller's
    leaving must reach the proxy through either."""
    data = tmp_path_factory.mktemp("skiff-lb-leaving") / "data"
    env = {
        "SKIFF_LB_WAIT_SECONDS": "30",
        "SKIFF_LB_MAX_IN_FLIGHT": str(CAP),
        "SKIFF_FAST_HTTP": "1" if request.param == "fast" else "0",
    }
    with running(data, env=env) as srv:
        yield srv


class MuteEndpoint:
    """A load-balancing endpoint of one mute worker, ready, and what that worker holds."""

    def __init__(self, server: Server) -> None:
        self.server = server
        endpoint = server.create_endpoint(
            "lb_mute_worker.py", type="LB", workersMax=1, idleTimeout=60
        )
        self.id = str(endpoint["id"])
        # Starts the worker from zero; answered once it passed /ping.
        ping = server.http.get(f"/lb/{self.id}/ping")
        assert ping.status_code == 200, ping.text
        port = server.wait_for(self._worker_port, timeout=10, what="the worker's port")
        self.worker_url = f"http://127.0.0.1:{port}"

    def _worker_port(self) -> int | None:
        found = self.server.http.get(f"/v1/endpoints/{self.id}/logs")
        assert found.status_code == 200, found.text
        for entry in found.json()["lines"]:
            line = str(entry["line"])
            if line.startswith(LISTENING):
                return int(line.removeprefix(LISTENING))
        return None  # its output not in the logs yet

    def held(self) -> int:
        """Requests the worker holds whose connection to it is still open (asked on a
        connection of its own, closed after)."""
        answer = httpx.get(f"{self.worker_url}/held", timeout=10)
        assert answer.status_code == 200, answer.text
        return int(answer.text)

    def caller(self, path: str, body: bytes = b"", declared: int | None = None) -> socket.socket:
        """A caller's connection with its request sent (``declared``: a ``Content-Length``
        above what ``body`` holds, the rest never sent)."""
        url = httpx.URL(self.server.url)
        conn = socket.create_connection((url.host, url.port), timeout=30)
        length = len(body) if declared is None else declared
        head = (
            f"{'POST' if length else 'GET'} /lb/{self.id}{path} HTTP/1.1\r\n"
            f"Host: {url.host}\r\nAuthorization: Bearer {self.server.key}\r\n"
        )
        if length:
            head += f"Content-Length: {length}\r\n"
        conn.sendall(head.encode() + b"\r\n" + body)
        return conn


@pytest.fixture
def mute(lb_server: Server) -> MuteEndpoint:
    return MuteEndpoint(lb_server)


def open_files(server: Server) -> int:
    assert server.proc is not None
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def give_up(callers: list[socket.socket]) -> None:
    for conn in callers:
        conn.close()


def settled(mute: MuteEndpoint, baseline: int) -> bool:
    return mute.held() == 0 and open_files(mute.server) <= baseline + SLACK


def test_callers_that_leave_before_the_answer_close_their_sockets_to_the_worker(
    mute: MuteEndpoint,
) -> None:
    server = mute.server
    baseline = open_files(server)
    # Waiting for the answer's head, with no body, with a whole body, and halfway through
    # sending one (a large one, which is streamed through as it comes; a small one is read
    # whole first and never reaches the worker).
    streamed = BUFFERED_BODY_BYTES + 1
    callers = (
        [mute.caller("/never") for _ in range(20)]
        + [mute.caller("/never", body=b'{"prompt": "hello"}') for _ in range(15)]
        + [mute.caller("/never", body=b"x" * 10, declared=streamed) for _ in range(15)]
    )
    halfway_small = [mute.caller("/never", body=b"x" * 10, declared=1000) for _ in range(5)]
    try:
        server.wait_for(lambda: mute.held() == 50, timeout=30, what="50 requests at the worker")
        # Each caller's connection and its socket to the worker; the small bodies' callers'
        # connections alone.
        assert open_files(server) >= baseline + 50 + 5
        assert mute.held() == 50
    finally:
        give_up(halfway_small)
        give_up(callers)

    server.wait_for(
        lambda: settled(mute, baseline),
        timeout=10,
        what=f"the worker's connections closed and the server's open files back to {baseline}",
    )


def test_callers_that_leave_in_the_middle_of_a_streamed_answer_close_their_sockets(
    mute: MuteEndpoint,
) -> None:
    server = mute.server
    baseline = open_files(server)
    callers = [mute.caller("/drip") for _ in range(20)]
    try:
        for conn in callers:  # the head and the first piece of the body came through
            seen = b""
            while b"data: 0" not in seen:
                piece = conn.recv(65_536)
                assert piece, seen
                seen += piece
            assert seen.startswith(b"HTTP/1.1 200"), seen
        assert mute.held() == 20
    finally:
        give_up(callers)

    server.wait_for(
        lambda: settled(mute, baseline),
        timeout=10,
        what=f"the worker's connections closed and the server's open files back to {baseline}",
    )


def test_requests_over_the_in_flight_cap_get_503_with_retry_after_until_callers_leave(
    mute: MuteEndpoint,
) -> None:
    server = mute.server
    url = f"/lb/{mute.id}/ping"
    for _ in range(2):  # the second time: every slot came back, not only some
        callers = [mute.caller("/never") for _ in range(CAP)]
        try:
            server.wait_for(lambda: mute.held() == CAP, timeout=30, what=f"{CAP} at the worker")

            over = server.http.get(url)

            assert over.status_code == 503, over.text
            assert over.headers["retry-after"] == "5"
            assert "too many requests in flight" in over.json()["error"]
        finally:
            give_up(callers)
        server.wait_for(lambda: mute.held() == 0, timeout=10, what="the callers' requests ended")
        assert server.http.get(url).status_code == 200
    metrics = server.http.get("/metrics").text
    assert f'skiff_lb_requests_total{{code="503",endpoint="{mute.id}"}} 2.0' in metrics


def test_the_cap_counts_each_endpoint_apart(mute: MuteEndpoint) -> None:
    other = MuteEndpoint(mute.server)
    callers = [mute.caller("/never") for _ in range(CAP)]
    try:
        mute.server.wait_for(lambda: mute.held() == CAP, timeout=30, what=f"{CAP} at the worker")

        answer = mute.server.http.get(f"/lb/{other.id}/ping")

        assert answer.status_code == 200, answer.text
    finally:
        give_up(callers)
