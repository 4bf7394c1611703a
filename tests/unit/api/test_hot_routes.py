"""The direct way in for the job and worker routes (api/hot.py): a request that names one of
them exactly reaches its handler without the framework's routing and middleware, and answers
exactly what the full stack would; anything else goes on to the full app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from skiff.api import errors
from skiff.api.hot import Handler, HotRoutes, WithHotRoutes
from skiff.api.responses import json_response
from skiff.errors import Invalid, NotFound


def _router() -> APIRouter:
    router = APIRouter()

    @router.post("/{endpoint_id}/run")
    async def run(request: Request) -> Response:
        body = await request.body()
        return json_response({"endpoint": request.path_params["endpoint_id"], "body": len(body)})

    @router.get("/{endpoint_id}/status/{job_id}")
    async def status(request: Request, job_id: str) -> Response:
        if job_id == "missing":
            raise NotFound(f"job {job_id} not found")
        if job_id == "bad":
            raise Invalid("ttl must be a number", field="ttl")
        if job_id == "boom":
            raise RuntimeError("a bug")
        return json_response({"id": job_id, "root": request.scope["root_path"]})

    @router.post("/{endpoint_id}/job-done/{worker_id}/{job_id}")
    async def done(request: Request, worker_id: str, job_id: str) -> Response:
        return json_response({"worker": worker_id, "job": job_id})

    return router


def _direct(router: APIRouter) -> list[tuple[str, str, Handler]]:
    """The router's routes as ``HotRoutes`` takes them (api/v2.py makes them so for /v2)."""
    routes = [r for r in router.routes if isinstance(r, APIRoute)]
    return [(m, r.path, r.endpoint) for r in routes for m in sorted(r.methods)]


class _Counting:
    """Middleware counting the requests that went through the full stack."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


@pytest.fixture
async def setup() -> AsyncIterator[tuple[httpx.AsyncClient, _Counting]]:
    router = _router()
    inner = FastAPI()
    errors.install(inner, "error")
    inner.include_router(router)
    counting = _Counting(inner)
    app = WithHotRoutes(routes=[Mount("/v2", app=counting)])
    app.hot = HotRoutes("/v2", _direct(router), errors.responder("error"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://skiff") as client:
        yield client, counting


async def test_a_named_route_reaches_its_handler_without_the_framework(
    setup: tuple[httpx.AsyncClient, _Counting],
) -> None:
    client, counting = setup
    answer = await client.post("/v2/ep1/run", content=b"12345")
    assert answer.status_code == 200
    assert answer.json() == {"endpoint": "ep1", "body": 5}
    answer = await client.post("/v2/ep1/job-done/w7/j9")
    assert answer.json() == {"worker": "w7", "job": "j9"}
    assert counting.seen == []


async def test_the_handler_sees_the_mount_as_its_root_path(
    setup: tuple[httpx.AsyncClient, _Counting],
) -> None:
    client, _ = setup
    answer = await client.get("/v2/ep1/status/j1")
    assert answer.json() == {"id": "j1", "root": "/v2"}


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/v2/ep1/run"),  # another method: the full app answers 405
        ("POST", "/v2/ep1/run/"),  # a trailing slash
        ("GET", "/v2//status/j1"),  # an empty parameter
        ("GET", "/v2/ep1/status"),  # a segment short
        ("GET", "/v2/ep1/statuses/j1"),  # another literal
        ("HEAD", "/v2/ep1/status/j1"),
    ],
)
async def test_anything_else_goes_on_to_the_full_app(
    setup: tuple[httpx.AsyncClient, _Counting], method: str, path: str
) -> None:
    client, counting = setup
    await client.request(method, path)
    assert counting.seen == [f"{method} {path}"]


@pytest.mark.parametrize(
    "job_id, status, body",
    [
        ("missing", 404, {"error": "job missing not found"}),
        ("bad", 400, {"error": "ttl must be a number", "field": "ttl"}),
        ("boom", 500, {"error": "internal server error"}),
    ],
)
async def test_errors_answer_as_the_full_stack_answers_them(
    setup: tuple[httpx.AsyncClient, _Counting], job_id: str, status: int, body: dict[str, str]
) -> None:
    client, counting = setup
    direct = await client.get(f"/v2/ep1/status/{job_id}")
    # The same route through the full app, with no direct routes attached.
    full = await _full_stack(f"/v2/ep1/status/{job_id}")
    assert (direct.status_code, direct.json()) == (status, body)
    assert (full.status_code, full.json()) == (status, body)
    assert counting.seen == []


async def _full_stack(path: str) -> httpx.Response:
    inner = FastAPI()
    errors.install(inner, "error")
    inner.include_router(_router())
    app = WithHotRoutes(routes=[Mount("/v2", app=inner)])
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://skiff") as client:
        return await client.get(path)


def test_a_handler_taking_more_than_path_parameters_cannot_go_direct() -> None:
    router = APIRouter()

    @router.get("/{endpoint_id}/odd")
    async def odd(request: Request, limit: int = 5) -> Response:
        return json_response({"limit": limit})

    with pytest.raises(ValueError, match="path params"):
        HotRoutes("/v2", _direct(router), _never)


def test_two_routes_of_one_shape_are_refused() -> None:
    router = APIRouter()

    @router.get("/{endpoint_id}/a/{x}")
    async def first(request: Request, x: str) -> Response:
        return json_response({})

    @router.get("/{endpoint_id}/a/{y}")
    async def second(request: Request, y: str) -> Response:
        return json_response({})

    with pytest.raises(ValueError, match="share the shape"):
        HotRoutes("/v2", _direct(router), _never)


async def _never(_request: Request, exc: Exception) -> Response:
    raise exc


@pytest.mark.parametrize(
    "path", ["/v2/ep%00/status/j1", "/v2/ep1/status/j%001", "/v2/ep1/job-done/w%00/j1"]
)
async def test_a_path_with_a_nul_names_nothing_and_reaches_no_handler(
    setup: tuple[httpx.AsyncClient, _Counting], path: str
) -> None:
    client, counting = setup
    answer = await client.request("POST" if "job-done" in path else "GET", path)
    assert answer.status_code == 404 and "NUL" in answer.json()["error"]
    assert counting.seen == []


async def test_a_query_with_a_nul_is_refused_before_any_route(
    setup: tuple[httpx.AsyncClient, _Counting],
) -> None:
    client, counting = setup
    answer = await client.get("/v2/ep1/statuses/j1?job_id=a%00b")
    assert answer.status_code == 400 and answer.json()["field"] == "query"
    assert counting.seen == []


def test_the_direct_table_never_matches_a_path_with_a_nul() -> None:
    hot = HotRoutes("/v2", _direct(_router()), errors.responder("error"))
    assert hot.match("GET", "/v2/ep1/status/j1") is not None
    assert hot.match("GET", "/v2/ep1/status/j\x001") is None
