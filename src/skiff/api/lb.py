"""Load-balancing endpoints' URLs: ``/lb/{endpoint_id}/any/path``, any method, passed to one
ready worker and its answer streamed back as it comes (``services/lb_proxy.py``).

The caller's key is checked as the job interface checks it (``Authorization``, the endpoint
must be the key's user's); it is not passed on to the worker. With ``SKIFF_LB_DOMAIN`` set,
``{endpoint_id}.{domain}/any/path`` reaches the same place (``host_routed``), as the hosted
platform's ``https://ENDPOINT_ID.api.runpod.ai/path``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from skiff.api import credentials, errors
from skiff.domain.balancing import endpoint_of_host
from skiff.domain.endpoints import EndpointType
from skiff.errors import Invalid, SkiffError
from skiff.services.hub import Services
from skiff.services.lb_proxy import Forwarding, Upstream

PREFIX = "/lb"
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def build(services: Services) -> Starlette:
    async def proxy(request: Request) -> Response:
        began = time.monotonic()
        endpoint_id = request.path_params["endpoint_id"]
        user = await services.auth.authenticate(
            credentials.api_key(request.headers.get("authorization"))
        )
        endpoint = await services.endpoints.for_jobs(user, endpoint_id)
        if endpoint.spec.type is not EndpointType.LB:
            raise Invalid(
                f"endpoint {endpoint_id} is queue-based: send jobs to "
                f"/v2/{endpoint_id}/run or /runsync"
            )
        try:
            upstream = await services.lb_proxy.forward(endpoint, _forwarding(request))
        except SkiffError as exc:
            services.metrics.lb_request(endpoint.id, exc.status_code, time.monotonic() - began)
            raise
        try:
            services.metrics.lb_request(endpoint.id, upstream.status, time.monotonic() - began)
            response = _Passthrough(upstream)
            response.raw_headers = upstream.raw_headers
        except BaseException:
            await upstream.aclose()
            raise
        return response

    app = Starlette(
        routes=[
            Route("/{endpoint_id}", proxy, methods=METHODS),
            Route("/{endpoint_id}/{path:path}", proxy, methods=METHODS),
        ]
    )
    errors.install(app, "error")
    return app


class _Passthrough(StreamingResponse):
    """The worker's answer as it comes, given back whatever ends it: Starlette's streaming
    (which stops when the caller goes away) inside a ``finally`` that gives the worker's lease
    back and closes its connection, shielded so a cancellation cannot skip it."""

    def __init__(self, upstream: Upstream) -> None:
        super().__init__(upstream.chunks(), status_code=upstream.status)
        self._upstream = upstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._upstream.aclose()


def _forwarding(request: Request) -> Forwarding:
    endpoint_id = request.path_params["endpoint_id"]
    path = "/" + request.path_params.get("path", "")
    scope = request.scope
    return Forwarding(
        method=request.method,
        path=path,
        query=scope.get("query_string", b""),
        headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
        body=_body(request),
        client=request.client.host if request.client else None,
        scheme=request.url.scheme,
        host=request.headers.get("host"),
        prefix=scope.get("skiff.lb_prefix", f"{PREFIX}/{endpoint_id}"),
    )


async def _body(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


def host_routed(scope: Scope, domain: str) -> Scope | None:
    """With ``SKIFF_LB_DOMAIN``: a request whose ``Host`` is ``{endpoint_id}.{domain}``, as
    the request for ``/lb/{endpoint_id}`` + its path; None for any other request."""
    endpoint_id = None
    for name, value in scope.get("headers", ()):
        if name == b"host":
            endpoint_id = endpoint_of_host(value.decode("latin-1"), domain)
            break
    if endpoint_id is None:
        return None
    prefix = f"{PREFIX}/{endpoint_id}"
    return {
        **scope,
        "path": prefix + scope["path"],
        "raw_path": prefix.encode() + scope.get("raw_path", scope["path"].encode()),
        # The worker sees the caller's own view: no prefix in the URL it was called by.
        "skiff.lb_prefix": "",
    }
