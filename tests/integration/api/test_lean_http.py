"""Hot routes answered from inside uvicorn's protocol (api/lean_http.py), on a real uvicorn
serving a real socket: the same answers as through the full stack, and uvicorn's connection
rules (keep-alive, pipelining, HTTP/1.0, disconnects) kept; what a handler sees of its client
behind a proxy, and how a streaming answer is sent, the same on both paths; ``skiff serve``
refusing a uvicorn the protocol was not tested with."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from click.testing import CliRunner
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from eventually import eventually_async
from skiff.api import errors
from skiff.api.body import read_body
from skiff.api.hot import Handler, HotRoutes, WithHotRoutes
from skiff.api.lb import BUFFERED_BODY_BYTES
from skiff.api.lean_http import (
    CONNECTED,
    LEAN_BODY_LIMIT,
    TESTED_UVICORN,
    lean_protocol,
    untested_uvicorn,
)
from skiff.api.responses import json_response
from skiff.cli import main
from skiff.errors import NotFound


@dataclass
class Seen:
    #: Requests that went through uvicorn's ASGI cycle (not the lean one).
    asgi: list[str]
    connected_after_close: list[bool]
    #: Takes waiting at the gate.
    at_gate: list[str] = field(default_factory=list)


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
            await asyncio.sleep(0.2)  # the point: answered after the requests behind it
        query = request.query_params.get("ttl")
        return json_response({"id": job_id, "ttl": query, "root": request.scope["root_path"]})

    @router.get("/{endpoint_id}/job-take/{worker_id}")
    async def take(request: Request, worker_id: str) -> Response:
        if worker_id == "wait":
            connected = request.scope[CONNECTED]
            seen.at_gate.append(worker_id)
            await gate.wait()
            seen.connected_after_close.append(await connected())
        return Response(status_code=204)

    return router


class _LbStub:
    """A load-balancing endpoints' proxy (api/lb.py) that answers with what it was given."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        params = scope["path_params"]
        if params["endpoint_id"] == "missing":
            raise NotFound("endpoint missing not found")
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        seen = {
            "endpoint": params["endpoint_id"],
            "path": params.get("path", ""),
            "method": scope["method"],
            "query": scope["query_string"].decode(),
            "body": len(body),
            "prefix": scope.get("skiff.lb_prefix"),
        }
        await send({"type": "http.response.start", "status": 200, "headers": [_JSON]})
        await send({"type": "http.response.body", "body": json.dumps(seen).encode()})


_JSON = (b"content-type", b"application/json")
#: ``SKIFF_LB_DOMAIN`` of the test server.
LB_DOMAIN = "lb.test"


def _hot_app(router: APIRouter) -> WithHotRoutes:
    """``router`` mounted at ``/v2`` as the server mounts its routes, its routes also hot; a
    stand-in for the load-balancing proxy at ``/lb``, also called straight."""
    inner = FastAPI()
    errors.install(inner, "error")
    inner.include_router(router)
    stub = _LbStub()
    lb = Starlette(
        routes=[Route("/{endpoint_id}", stub), Route("/{endpoint_id}/{path:path}", stub)]
    )
    errors.install(lb, "error")
    app = WithHotRoutes(routes=[Mount("/v2", app=inner), Mount("/lb", app=lb)])
    app.hot = HotRoutes("/v2", _direct(router), errors.responder("error"))
    app.hot.lb = stub
    app.lb_domain = app.hot.lb_domain = LB_DOMAIN
    return app


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
    app = _hot_app(router)
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
    await eventually_async(lambda: srv.started, "uvicorn to start")
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


async def test_a_load_balancing_request_goes_to_its_proxy_without_the_asgi_cycle(
    server: Running,
) -> None:
    async with httpx.AsyncClient() as client:
        posted = await client.post(server.url("/lb/ep1/gen/a%20b?n=2"), content=b"hello")
        bare = await client.get(server.url("/lb/ep1"))
        missing = await client.get(server.url("/lb/missing/x"))
    assert posted.json() == {
        "endpoint": "ep1",
        "path": "gen/a b",
        "method": "POST",
        "query": "n=2",
        "body": 5,
        "prefix": None,
    }
    assert bare.json()["path"] == "" and bare.json()["method"] == "GET"
    # Refused before its answer started: answered as the proxy's own app answers it.
    assert missing.status_code == 404
    assert missing.json() == {"error": "endpoint missing not found"}
    assert server.seen.asgi == []


async def test_a_load_balancing_endpoints_own_host_goes_to_its_proxy_with_the_whole_path(
    server: Running,
) -> None:
    async with httpx.AsyncClient() as client:
        # A /v2 path too: under the endpoint's own host, every path is its workers'.
        got = await client.get(
            server.url("/v2/ep1/status/j1"), headers={"Host": f"ep9.{LB_DOMAIN}"}
        )
    assert got.json()["endpoint"] == "ep9" and got.json()["path"] == "v2/ep1/status/j1"
    assert got.json()["prefix"] == ""
    assert server.seen.asgi == []


async def test_a_load_balancing_body_over_what_is_read_whole_is_streamed_by_the_asgi_cycle(
    server: Running,
) -> None:
    body = b"x" * (BUFFERED_BODY_BYTES + 1)
    async with httpx.AsyncClient() as client:
        got = await client.put(server.url("/lb/ep1/up"), content=body)
    assert got.json()["body"] == len(body) and got.json()["method"] == "PUT"
    assert server.seen.asgi == ["PUT /lb/ep1/up"]


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
    await asyncio.sleep(0.05)  # the point: the rest arrives later, in a read of its own
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
    await eventually_async(lambda: server.seen.at_gate, "the take to wait at the gate")
    writer.close()
    await writer.wait_closed()
    # Kept: a moment for the server's side of the socket to see the close; nothing here can
    # observe that but the handler itself, which is what the test asks.
    await asyncio.sleep(0.05)
    server.gate.set()
    assert await eventually_async(
        lambda: server.seen.connected_after_close, "the handler to look at its client"
    ) == [False]


# -- The same on both paths: uvicorn's own protocol (the ASGI cycle) and the lean one ----------


def _client_router() -> APIRouter:
    router = APIRouter()

    @router.get("/{endpoint_id}/status/{job_id}")
    async def status(request: Request, job_id: str) -> Response:
        client = request.client
        return json_response(
            {
                "client": [client.host, client.port] if client else None,
                "scheme": request.url.scheme,
                "url": str(request.url),
            }
        )

    @router.get("/{endpoint_id}/stream/{job_id}")
    async def stream(request: Request, job_id: str) -> Response:
        async def parts() -> AsyncIterator[bytes]:
            for i in range(3):
                yield f"data: {i}\n\n".encode()
                await asyncio.sleep(0.01)

        return StreamingResponse(parts(), media_type="text/event-stream")

    return router


@contextlib.asynccontextmanager
async def _serving(lean: bool, **config: Any) -> AsyncIterator[Running]:
    """A real uvicorn on the routes above, with the lean protocol or uvicorn's own."""
    seen = Seen([], [])
    router = _client_router()
    app = _hot_app(router)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Config(
        _Counting(app, seen),
        http=lean_protocol(app.hot) if lean else "httptools",
        lifespan="off",
        log_level="warning",
        loop="none",
        **config,
    )
    srv = uvicorn.Server(uv)
    task = asyncio.create_task(srv.serve(sockets=[sock]))
    await eventually_async(lambda: srv.started, "uvicorn to start")
    try:
        yield Running(sock.getsockname()[1], seen, asyncio.Event())
    finally:
        srv.should_exit = True
        await task


PATHS = pytest.mark.parametrize("lean", [True, False], ids=["lean", "asgi"])
FORWARDED = {"X-Forwarded-For": "203.0.113.7:4711", "X-Forwarded-Proto": "https"}


async def _seen_by_handler(running: Running, headers: dict[str, str]) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        answer = await client.get(running.url("/v2/ep1/status/j1?x=1"), headers=headers)
    assert answer.status_code == 200
    return dict(answer.json())


@PATHS
async def test_a_trusted_proxy_names_the_client_and_scheme_on_both_paths(lean: bool) -> None:
    async with _serving(lean) as running:  # uvicorn trusts 127.0.0.1 by default
        seen = await _seen_by_handler(running, FORWARDED)
        plain = await _seen_by_handler(running, {})
    assert seen["client"] == ["203.0.113.7", 4711]
    assert seen["scheme"] == "https"
    assert seen["url"] == f"https://127.0.0.1:{running.port}/v2/ep1/status/j1?x=1"
    assert plain["client"][0] == "127.0.0.1" and plain["scheme"] == "http"
    # Which path it took: the lean one never reaches the ASGI app.
    assert running.seen.asgi == ([] if lean else ["GET /v2/ep1/status/j1"] * 2)


@PATHS
async def test_an_untrusted_peer_cannot_name_the_client_or_scheme(lean: bool) -> None:
    async with _serving(lean, forwarded_allow_ips="10.1.2.3") as running:
        seen = await _seen_by_handler(running, FORWARDED)
    assert seen["client"][0] == "127.0.0.1" and seen["scheme"] == "http"


@PATHS
async def test_proxy_headers_off_are_ignored_even_from_a_trusted_peer(lean: bool) -> None:
    async with _serving(lean, proxy_headers=False) as running:
        seen = await _seen_by_handler(running, FORWARDED)
    assert seen["client"][0] == "127.0.0.1" and seen["scheme"] == "http"


@PATHS
async def test_every_peer_trusted_takes_the_first_forwarded_address(lean: bool) -> None:
    headers = {"X-Forwarded-For": "198.51.100.1, 10.0.0.2", "X-Forwarded-Proto": "wss"}
    async with _serving(lean, forwarded_allow_ips="*") as running:
        seen = await _seen_by_handler(running, headers)
    assert seen["client"] == ["198.51.100.1", 0] and seen["scheme"] == "wss"


async def test_a_streaming_answer_is_sent_alike_on_both_paths() -> None:
    request = (
        b"GET /v2/ep1/stream/j1 HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /v2/ep1/stream/j2 HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    answers = []
    for lean in (True, False):
        async with _serving(lean) as running:
            reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
            writer.write(request)
            await writer.drain()
            received = b""
            while received.count(b"\r\n0\r\n\r\n") < 2:
                chunk = await asyncio.wait_for(reader.read(65536), 5)
                assert chunk, received
                received += chunk
            writer.close()
            assert running.seen.asgi == (
                [] if lean else ["GET /v2/ep1/stream/j1", "GET /v2/ep1/stream/j2"]
            )
        # The date changes from one second to the next; nothing else may differ.
        answers.append(
            b"\r\n".join(x for x in received.split(b"\r\n") if not x.startswith(b"date: "))
        )
    lean_answer, asgi_answer = answers
    assert lean_answer == asgi_answer
    head, _, rest = lean_answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head and b"content-type: text/event-stream" in head
    assert rest.startswith(b"9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n")


# -- The uvicorn it was tested with ----------------------------------------------------------


def test_the_tested_uvicorn_is_the_one_requirements_lock_pins() -> None:
    lock = (Path(__file__).parents[3] / "requirements.lock").read_text()
    pinned = re.search(r"^uvicorn==(\S+)", lock, re.MULTILINE)
    assert pinned is not None
    assert (pinned.group(1),) == TESTED_UVICORN
    assert untested_uvicorn() is None


def test_serve_refuses_an_untested_uvicorn_saying_which_and_the_way_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(uvicorn, "__version__", "9.9.9")
    monkeypatch.delenv("SKIFF_FAST_HTTP", raising=False)
    data = tmp_path / "data"
    result = CliRunner().invoke(main, ["serve", "--port", "1", "--data-dir", str(data)])
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert "uvicorn 9.9.9 is installed" in message
    assert f"tested with uvicorn {TESTED_UVICORN[0]} only" in message
    assert "SKIFF_FAST_HTTP=0" in message
    assert not data.exists()  # refused before anything was claimed or made
