"""``/v2``: every route of the job interface, the worker protocol and the OpenAI-compatible
calls, declared once, and the two ways in that are built from that one list.

Where a request goes: ``routes`` below names, for each ``/v2`` route, its method, path,
handler (the functions in api/jobs.py, api/workers.py and api/openai.py), OpenAPI description
and whether it is *hot*. From that list ``build`` makes

* the mounted FastAPI app, which serves ``/v2/openapi.json`` and ``/v2/docs`` and routes what
  the hot dispatch does not take (HEAD, a trailing slash, the OpenAI routes), and
* ``HotRoutes`` (api/hot.py): a hot route's handler reached without the framework's routing
  and middleware, for a request whose method and path name that route exactly. The app in
  front of everything (``WithHotRoutes``) offers each ASGI request to it first.

Every job and worker route is hot (the routes a job crosses several times: submit, status,
the worker's take, done and ping, and the rest of the job interface); the OpenAI routes are
not. Their requests usually do not reach the ASGI app at all: ``skiff serve`` runs uvicorn with
``LeanHttpProtocol`` (api/lean_http.py), uvicorn's own httptools protocol (the same
parser, keep-alive, pipelining and flow control) that, once a request's head is in, asks
``HotRoutes`` whether it names a hot route. If so, and the request is plain (a body of at
most 1 MiB with a ``Content-Length``, no ``Transfer-Encoding``, ``Expect`` or upgrade), it
reads the body, calls the same handler through ``HotRoutes.call`` with a Starlette
``Request`` on a scope it builds itself, and writes the whole answer in one write, sparing
the ASGI cycle (the scope, uvicorn's proxy-headers middleware, a ``send`` per message). What
that cycle would have done, it does too: it reads ``X-Forwarded-For`` and
``X-Forwarded-Proto`` from the addresses uvicorn trusts (``FORWARDED_ALLOW_IPS``), so a
handler sees the same client and scheme; a response that streams goes out as uvicorn sends
one, chunked. Any other request takes uvicorn's own cycle. The same protocol keeps the
connection rules (api/connections.py). It subclasses uvicorn's internals, so ``skiff serve``
refuses a uvicorn other than the tested one (``lean_http.TESTED_UVICORN``);
``SKIFF_FAST_HTTP=0`` serves with uvicorn's plain httptools protocol instead, every request
through the ASGI app (and ``HotRoutes``), without the connection rules. The e2e job-API tests
run against both.

So ``/v2/{endpoint_id}/run`` goes: uvicorn's parser -> ``LeanHttpProtocol`` (or, off the
fast path, the ASGI cycle -> ``WithHotRoutes``) -> ``HotRoutes`` -> ``run`` in api/jobs.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi_offline import FastAPIOffline

from skiff.api import errors
from skiff.api import jobs as jobs_api
from skiff.api import jobs_openapi as oa
from skiff.api import openai as openai_api
from skiff.api import workers as workers_api
from skiff.api.hot import Handler, HotRoutes
from skiff.api.openapi3 import document_errors, downgrade_to_3_0
from skiff.api.responses import NO_TELEMETRY
from skiff.services.hub import Services

#: Where the interface is mounted.
PREFIX = "/v2"

_OPENAI_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The worker's answer (JSON), or an event stream with `stream: true`",
        "content": {"application/json": {"schema": {}}, "text/event-stream": {"schema": {}}},
    },
    500: {
        "description": "The worker failed the job: OpenAI's error object with the worker's "
        "message, `x-should-retry: false` (a retry would run it again) and `x-skiff-job-id`; "
        "a status the worker named in its error instead of 500"
    },
    504: {
        "description": "No answer within 300 s: the job goes on (`x-skiff-job-id`), so "
        "`x-should-retry: false`"
    },
}
_OPENAI_UNKNOWN: dict[int | str, dict[str, Any]] = {
    404: {"description": "Not an OpenAI route this endpoint relays (OpenAI's error object)"}
}


@dataclass(frozen=True)
class V2Route:
    """One route: what FastAPI is told of it, and whether ``HotRoutes`` serves it."""

    method: str
    #: Below ``PREFIX``.
    path: str
    handler: Handler
    #: The OpenAPI tag; the description is the handler's docstring.
    tag: str
    summary: str
    responses: dict[int | str, dict[str, Any]] | None = None
    openapi_extra: dict[str, Any] | None = None
    #: Served straight from ``HotRoutes`` (and the fast protocol): the handler must take only
    #: the request and path parameters, and the path have a literal segment.
    hot: bool = False


def routes(services: Services) -> tuple[V2Route, ...]:
    """Every ``/v2`` route, in the order of the OpenAPI description."""
    job = jobs_api.build(services)
    openai = openai_api.build(services)
    worker = workers_api.build(services)
    jobs, chat, workers = "jobs", "openai", "worker protocol"
    return (
        # The job interface (the runpod SDK's Endpoint).
        V2Route(
            "POST",
            "/{endpoint_id}/run",
            job.run,
            jobs,
            "Submit a job (async)",
            oa.RUN_RESPONSES,
            oa.JOB_BODY,
            hot=True,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/runsync",
            job.runsync,
            jobs,
            "Submit a job and wait",
            oa.RUNSYNC_RESPONSES,
            oa.RUNSYNC_EXTRA,
            hot=True,
        ),
        V2Route(
            "GET",
            "/{endpoint_id}/status/{job_id}",
            job.status,
            jobs,
            "A job's state and result",
            oa.STATUS_RESPONSES,
            oa.STATUS_EXTRA,
            hot=True,
        ),
        V2Route(
            "GET",
            "/{endpoint_id}/requests",
            job.requests,
            jobs,
            "The endpoint's recent jobs",
            oa.REQUESTS_RESPONSES,
            oa.REQUESTS_EXTRA,
            hot=True,
        ),
        V2Route(
            "GET",
            "/{endpoint_id}/stream/{job_id}",
            job.stream,
            jobs,
            "Chunks a generator handler yielded",
            oa.STREAM_RESPONSES,
            hot=True,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/cancel/{job_id}",
            job.cancel,
            jobs,
            "Cancel a queued or running job",
            oa.ID_STATUS_RESPONSES,
            hot=True,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/retry/{job_id}",
            job.retry,
            jobs,
            "Requeue a FAILED or TIMED_OUT job",
            oa.ID_STATUS_RESPONSES,
            hot=True,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/purge-queue",
            job.purge_queue,
            jobs,
            "Remove every queued job",
            oa.PURGE_RESPONSES,
            hot=True,
        ),
        V2Route(
            "GET",
            "/{endpoint_id}/health",
            job.health,
            jobs,
            "Job and worker counts",
            oa.HEALTH_RESPONSES,
            hot=True,
        ),
        # OpenAI-compatible calls, each wrapped as a job; through the framework (they stream).
        V2Route(
            "POST",
            "/{endpoint_id}/openai/v1/chat/completions",
            openai.chat_completions,
            chat,
            "Chat completion",
            _OPENAI_ANSWERS,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/openai/v1/completions",
            openai.completions,
            chat,
            "Completion",
            _OPENAI_ANSWERS,
        ),
        V2Route(
            "GET", "/{endpoint_id}/openai/v1/models", openai.models, chat, "Models", _OPENAI_ANSWERS
        ),
        V2Route(
            "GET",
            "/{endpoint_id}/openai/v1/models/{model}",
            openai.model,
            chat,
            "One model",
            _OPENAI_ANSWERS,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/openai/v1/embeddings",
            openai.embeddings,
            chat,
            "Embeddings",
            _OPENAI_ANSWERS,
        ),
        V2Route(
            "GET",
            "/{endpoint_id}/openai/v1/{path:path}",
            openai.unknown,
            chat,
            "Any other OpenAI route (GET)",
            _OPENAI_UNKNOWN,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/openai/v1/{path:path}",
            openai.unknown,
            chat,
            "Any other OpenAI route (POST)",
            _OPENAI_UNKNOWN,
        ),
        # The worker protocol (the runpod SDK's serverless.start).
        V2Route(
            "GET",
            "/{endpoint_id}/job-take/{worker_id}",
            worker.job_take,
            workers,
            "Long-poll for one job",
            hot=True,
        ),
        V2Route(
            "GET",
            "/{endpoint_id}/job-take-batch/{worker_id}",
            worker.job_take_batch,
            workers,
            "Long-poll for jobs",
            hot=True,
        ),
        V2Route(
            "GET",
            "/{endpoint_id}/job-stop/{worker_id}",
            worker.job_stop,
            workers,
            "Long-poll for jobs to stop",
            hot=True,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/job-done/{worker_id}/{job_id}",
            worker.job_done,
            workers,
            "Report a result",
            hot=True,
        ),
        V2Route(
            "POST",
            "/{endpoint_id}/job-stream/{worker_id}/{job_id}",
            worker.job_stream,
            workers,
            "Report a chunk",
            hot=True,
        ),
        V2Route(
            "GET", "/{endpoint_id}/ping/{worker_id}", worker.ping, workers, "Heartbeat", hot=True
        ),
    )


def router(declared: Sequence[V2Route]) -> APIRouter:
    """The routes as FastAPI routes (for the app's routing and its OpenAPI description)."""
    made = APIRouter()
    for route in declared:
        made.add_api_route(
            route.path,
            route.handler,
            methods=[route.method],
            tags=[route.tag],
            summary=route.summary,
            responses=route.responses,
            openapi_extra=route.openapi_extra,
        )
    return made


def hot_routes(declared: Sequence[V2Route], prefix: str = PREFIX) -> HotRoutes:
    """The hot routes, straight to their handlers, errors answered as the app answers them."""
    direct = [(r.method, r.path, r.handler) for r in declared if r.hot]
    return HotRoutes(prefix, direct, errors.responder("error"))


@dataclass(frozen=True)
class V2:
    #: Mounted at ``PREFIX``.
    app: FastAPI
    #: Offered every request first (``WithHotRoutes.hot``, ``lean_http.lean_protocol``).
    hot: HotRoutes


def build(services: Services) -> V2:
    declared = routes(services)
    return V2(_app(declared), hot_routes(declared))


def _app(declared: Sequence[V2Route]) -> FastAPI:
    app = FastAPIOffline(
        title="skiff job interface",
        telemetry=NO_TELEMETRY,
        version="0.1.0",
        description=(
            "The queue-based job interface (`/v2/{endpoint_id}/...`) that the runpod SDK's "
            "`Endpoint` calls, and the worker protocol its `serverless.start` speaks. Clients "
            "authenticate with `Authorization: Bearer <API key>` (the bare key works too); "
            'workers with their endpoint\'s worker token. Errors are `{"error": ...}`.'
        ),
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    errors.install(app, "error")
    app.include_router(router(declared))
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original()
            schema["servers"] = [{"url": PREFIX}]
            app.openapi_schema = downgrade_to_3_0(
                document_errors(schema, "error", ("400", "401", "404", "413", "429"))
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
