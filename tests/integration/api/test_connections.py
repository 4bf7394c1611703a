"""The connection rules (api/connections.py) on a real uvicorn with the lean protocol: which
connection makes room when the cap is reached, and the open-file limit raised at start."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from eventually import eventually_async
from skiff.api import errors
from skiff.api.connections import ConnectionRules, connection_cap
from skiff.api.hot import HotRoutes
from skiff.api.lean_http import lean_protocol

CAP = 5


@dataclass
class Running:
    port: int
    release: asyncio.Event
    #: Requests to /busy being worked on.
    busy: list[str]

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


@pytest.fixture
async def server() -> AsyncIterator[Running]:
    async with serving(
        ConnectionRules(header_timeout=60, body_timeout=60, max_connections=CAP)
    ) as srv:
        yield srv


@contextlib.asynccontextmanager
async def serving(rules: ConnectionRules) -> AsyncIterator[Running]:
    release = asyncio.Event()

    async def ok(_request: Request) -> Response:
        return PlainTextResponse("ok")

    working: list[str] = []

    async def busy(_request: Request) -> Response:
        working.append("busy")
        await release.wait()
        return PlainTextResponse("done")

    app = Starlette(routes=[Route("/ok", ok), Route("/busy", busy)])
    hot = HotRoutes("/v2", [], errors.responder("error"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, http=lean_protocol(hot, rules), lifespan="off", log_level="warning", loop="none"
    )
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve(sockets=[sock]))
    await eventually_async(lambda: srv.started, "uvicorn to start")
    yield Running(sock.getsockname()[1], release, working)
    release.set()
    srv.should_exit = True
    await task


async def _ask(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> bytes | None:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    return await _answer(reader)


async def _answer(reader: asyncio.StreamReader, within: float = 2) -> bytes | None:
    """The next answer on a connection (b"" once it is closed), None if nothing comes."""
    try:
        return await asyncio.wait_for(reader.read(65536), within)
    except TimeoutError:
        return None


async def test_over_the_cap_the_connection_idle_longest_makes_room(server: Running) -> None:
    idle = [await server.connect() for _ in range(CAP)]
    for reader, writer in idle:
        answer = await _ask(reader, writer, "/ok")
        assert answer is not None and answer.endswith(b"ok")
    reader, writer = await server.connect()
    answer = await _ask(reader, writer, "/ok")
    assert answer is not None and answer.endswith(b"ok")
    # The first to go idle was closed; the others are kept.
    assert await _answer(idle[0][0]) == b""
    assert await _answer(idle[1][0], 0.3) is None
    for _, w in [*idle, (reader, writer)]:
        w.close()


async def test_over_the_cap_a_silent_connection_goes_before_an_idle_one(
    server: Running,
) -> None:
    idle = [await server.connect() for _ in range(CAP - 1)]
    for reader, writer in idle:
        await _ask(reader, writer, "/ok")
    silent = await server.connect()
    # Kept: the server must have taken the silent connection in before the next one comes,
    # and a connection that sends nothing shows the client nothing to wait on.
    await asyncio.sleep(0.05)
    reader, writer = await server.connect()
    answer = await _ask(reader, writer, "/ok")
    assert answer is not None and answer.endswith(b"ok")
    assert await _answer(silent[0]) == b""
    assert await _answer(idle[0][0], 0.3) is None
    for _, w in [*idle, silent, (reader, writer)]:
        w.close()


async def test_when_every_connection_is_busy_a_new_one_is_refused_at_once(
    server: Running,
) -> None:
    busy = [await server.connect() for _ in range(CAP)]
    for _, writer in busy:
        writer.write(b"GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
    await eventually_async(lambda: len(server.busy) == CAP, "every connection to be busy")
    reader, writer = await server.connect()
    refused = await _answer(reader)
    assert refused is not None and refused.startswith(b"HTTP/1.1 503 ")
    assert b"retry-after: 1" in refused and refused.endswith(b"try again shortly")
    server.release.set()
    for r, _ in busy:  # the busy ones were not cut: they get their answers
        answer = await _answer(r)
        assert answer is not None and answer.endswith(b"done")
    for _, w in [*busy, (reader, writer)]:
        w.close()


async def test_a_head_behind_an_answer_being_worked_on_waits_for_that_answer() -> None:
    # A pipelined request's head, begun while the one before it is still being answered: the
    # wait is the server's, so the header timeout must neither cut the first answer short
    # nor close the connection before the client could finish the second head.
    rules = ConnectionRules(header_timeout=0.3, body_timeout=0.3, max_connections=CAP)
    async with serving(rules) as srv:
        reader, writer = await srv.connect()
        writer.write(b"GET /busy HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\n")
        await writer.drain()
        await asyncio.sleep(1.0)  # well past the header timeout
        srv.release.set()
        first = await asyncio.wait_for(reader.readuntil(b"done"), 2)
        writer.write(b"Host: x\r\n\r\n")
        await writer.drain()
        second = await asyncio.wait_for(reader.readuntil(b"ok"), 2)
        writer.close()
    assert first.startswith(b"HTTP/1.1 200 ") and second.startswith(b"HTTP/1.1 200 ")


def test_the_cap_leaves_files_for_the_rest_of_the_server() -> None:
    assert connection_cap(1024) == 768
    assert connection_cap(100_000) == 100_000 - 256
    assert connection_cap(40) == 30
    assert connection_cap(8) == 16


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("the hard limit leaves nothing to raise")

    def lower() -> None:  # a process started with the common low soft limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    script = (
        "import resource\n"
        "from skiff.api.connections import raise_open_file_limit\n"
        "print(raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], preexec_fn=lower, capture_output=True, text=True
    )
    assert out.stdout.split() == [str(hard), str(hard)], out.stderr
