"""Hot routes answered from inside uvicorn's protocol (api/lean_http.py), on a real uvicorn
serving a real socket: the same answers as through the full stack, and uvicorn's connection
rules (keep-alive, pipelining, HTTP/1.0, disconnects) kept."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
import uvicorn
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from skiff.api import errors
from skiff.api.body import read_body
from skiff.api.hot import Handler, HotRoutes, WithHotRoutes
from skiff.api.lean_http import CONNECTED, LEAN_BODY_LIMIT, lean_protocol
from skiff.api.responses import json_response
from skiff.errors import NotFound


@dataclass
class Seen:
    #: Requests that went through uvicorn's ASGI cycle (not the lean one).
    asgi: list[str]
    connected_after_close: list[bool]


def _router(seen: Seen, gate: asyncio.Event) -> APIRouter:
    router = APIRouter()

    @router.post("/{endpoint_id}/run")
    async def run(request: Request) -> Response:
        body = await read_body(request, 2 * LEAN_BODY_LIMIT)
        return json_response({"endpoint": request.path_params["endpoint_id"], "body": len(body)})

    @router.get("/{endpoint_id}/status/{job_id}")
    async def status(request: Request, job_id: str) -> Response:
        if job_id == "missing":
            raise NotFound(f"job {job_id} not found")
        if job_id == "slow":
            await asyncio.sleep(0.2)
        query = request.query_params.get("ttl")
        return json_response({"id": job_id, "ttl": query, "root": request.scope["root_path"]})

    @router.get("/{endpoint_id}/job-take/{worker_id}")
    async def take(request: Request, worker_id: str) -> Response:
        if worker_id == "wait":
            connected = request.scope[CONNECTED]
            await gate.wait()
            seen.connected_after_close.append(await connected())
        return Response(status_code=204)

    return router


def _direct(router: APIRouter) -> list[tuple[str, str, Handler]]:
    """The router's routes as ``HotRoutes`` takes them (api/v2.py makes them so for /v2)."""
    routes = [r for r in router.routes if isinstance(r, APIRoute)]
    return [(m, r.path, r.endpoint) for r in routes for m in sorted(r.methods)]


class _Counting:
    def __init__(self, app: ASGIApp, seen: Seen) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.asgi.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


@dataclass
class Running:
    port: int
    seen: Seen
    gate: asyncio.Event

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def raw(self, data: bytes, answers: int = 1) -> bytes:
        """Send ``data`` on one connection; read until ``answers`` responses came back."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(data)
        await writer.drain()
        received = b""
        while received.count(b"HTTP/1.1 ") < answers or not _complete(received, answers):
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            if not chunk:
                break
            received += chunk
        writer.close()
        return received


def _complete(received: bytes, answers: int) -> bool:
    """Whether ``answers`` whole responses (each with a Content-Length) are in ``received``."""
    rest = received
    for _ in range(answers):
        head_end = rest.find(b"\r\n\r\n")
        if head_end < 0:
            return False
        head = rest[:head_end].lower()
        at = head.find(b"content-length: ")
        length = int(head[at + 16 :].split(b"\r\n")[0]) if at >= 0 else 0
        if len(rest) < head_end + 4 + length:
            return False
        rest = rest[head_end + 4 + length :]
    return True


@pytest.fixture
async def server() -> AsyncIterator[Running]:
    seen = Seen([], [])
    gate = asyncio.Event()
    router = _router(seen, gate)
    inner = FastAPI()
    errors.install(inner, "error")
    inner.include_router(router)
    app = WithHotRoutes(routes=[Mount("/v2", app=inner)])
    app.hot = HotRoutes("/v2", _direct(router), errors.responder("error"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        _Counting(app, seen),
        http=lean_protocol(app.hot),
        lifespan="off",
        log_level="warning",
        loop="none",
    )
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve(sockets=[sock]))
    while not srv.started:  # noqa: ASYNC110 - uvicorn offers a flag, not an event
        await asyncio.sleep(0.01)
    yield Running(sock.getsockname()[1], seen, gate)
    gate.set()
    srv.should_exit = True
    await task


async def test_a_hot_route_is_answered_without_the_asgi_cycle(server: Running) -> None:
    async with httpx.AsyncClient() as client:
        got = await client.post(server.url("/v2/ep1/run"), json={"input": {"x": 1}})
        status = await client.get(server.url("/v2/ep1/status/j1?ttl=5"))
    assert got.status_code == 200
    assert got.json() == {"endpoint": "ep1", "body": len(b'{"input":{"x":1}}')}
    assert got.headers["content-type"] == "application/json"
    assert "date" in got.headers and got.headers["server"] == "uvicorn"
    assert status.json() == {"id": "j1", "ttl": "5", "root": "/v2"}
    assert server.seen.asgi == []


async def test_errors_are_answered_as_the_app_answers_them(server: Running) -> None:
    async with httpx.AsyncClient() as client:
        missing = await client.get(server.url("/v2/ep1/status/missing"))
        unknown = await client.get(server.url("/v2/ep1/nope"))
    assert missing.status_code == 404 and missing.json() == {"error": "job missing not found"}
    assert unknown.status_code == 404
    assert server.seen.asgi == ["GET /v2/ep1/nope"]


async def test_a_body_over_the_lean_limit_takes_the_asgi_cycle_and_its_limits(
    server: Running,
) -> None:
    body = b"x" * (LEAN_BODY_LIMIT + 1)
    async with httpx.AsyncClient() as client:
        got = await client.post(server.url("/v2/ep1/run"), content=body)
    assert got.json() == {"endpoint": "ep1", "body": len(body)}
    assert server.seen.asgi == ["POST /v2/ep1/run"]


async def test_a_chunked_body_takes_the_asgi_cycle(server: Running) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b'{"input":'
        yield b" 1}"

    async with httpx.AsyncClient() as client:
        got = await client.post(server.url("/v2/ep1/run"), content=parts())
    assert got.json() == {"endpoint": "ep1", "body": 12}
    assert server.seen.asgi == ["POST /v2/ep1/run"]


async def test_a_body_arriving_in_pieces_is_read_whole(server: Running) -> None:
    head = b"POST /v2/ep1/run HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(head + b"a" * 40000)
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(b"b" * 60000)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert answer.endswith(b'{"endpoint":"ep1","body":100000}')


async def test_pipelined_requests_are_answered_in_order(server: Running) -> None:
    requests = (
        b"GET /v2/ep1/status/slow HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /v2/ep1/status/fast HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /v2/ep1/other HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /v2/ep1/status/last HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    answers = await server.raw(requests, answers=4)
    order = [answers.find(marker) for marker in (b'"slow"', b'"fast"', b"no such", b'"last"')]
    assert answers.count(b"HTTP/1.1 ") == 4
    assert order[0] < order[1] < answers.find(b"HTTP/1.1 404") < order[3]


async def test_http_1_0_gets_its_answer_and_the_connection_closed(server: Running) -> None:
    answer = await server.raw(b"GET /v2/ep1/status/j1 HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert b"connection: close" in answer.lower()


async def test_connection_close_is_honoured(server: Running) -> None:
    answer = await server.raw(
        b"GET /v2/ep1/status/j1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert b"connection: close" in answer.lower()


async def test_expect_continue_takes_the_asgi_cycle(server: Running) -> None:
    head = (
        b"POST /v2/ep1/run HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(head)
    await writer.drain()
    interim = await asyncio.wait_for(reader.read(1024), 5)
    assert interim.startswith(b"HTTP/1.1 100 Continue")
    writer.write(b"{}")
    await writer.drain()
    answer = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
    while not answer.endswith(b'"body":2}'):
        answer += await asyncio.wait_for(reader.read(1024), 5)
    writer.close()
    assert server.seen.asgi == ["POST /v2/ep1/run"]


async def test_a_handler_sees_that_its_client_went_away(server: Running) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /v2/ep1/job-take/wait HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    await writer.wait_closed()
    await asyncio.sleep(0.05)
    server.gate.set()
    for _ in range(100):
        if server.seen.connected_after_close:
            break
        await asyncio.sleep(0.01)
    assert server.seen.connected_after_close == [False]
