"""A direct way in for the hot ``/v2`` routes (declared in api/v2.py), the ones every job
crosses several times.

Through the full stack a ``/run`` passes Starlette's and FastAPI's middlewares, the mounted
``/v2`` app and a regular-expression match against every route, before and after skiff's own
code: most of its CPU (docs/performance.md). ``HotRoutes`` sits in front of the whole
app and, for a request whose method and path name one of these routes exactly, calls that
route's own handler function with a plain Starlette ``Request`` and answers its exceptions with
the same handlers ``errors.install`` registers. Anything else (another method, a trailing slash,
``/v2/docs``, HEAD) goes on to the full app unchanged, which also still serves these routes'
OpenAPI description: one declaration and one handler per route (api/v2.py). The fast protocol
(api/lean_http.py) reaches the same handlers through ``match`` and ``call``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from skiff.api.lb import METHODS as LB_METHODS
from skiff.api.lb import PREFIX as LB_PREFIX
from skiff.api.lb import host_routed
from skiff.api.nul import nul_refusal

Handler = Callable[..., Awaitable[Response]]
ErrorResponder = Callable[[Request, Exception], Awaitable[Response]]


@dataclass(frozen=True)
class Route:
    method: str
    #: The path's segments after the mount prefix; ``None`` where a parameter goes.
    literals: tuple[str | None, ...]
    names: tuple[str, ...]
    handler: Handler
    #: Path parameters the handler takes as keyword arguments (the rest: ``request.path_params``).
    kwargs: tuple[str, ...]


def _segments(template: str) -> tuple[tuple[str | None, ...], tuple[str, ...]]:
    literals: list[str | None] = []
    names: list[str] = []
    for part in template.strip("/").split("/"):
        if part.startswith("{") and part.endswith("}") and ":" not in part:
            literals.append(None)
            names.append(part[1:-1])
        elif "{" in part or "}" in part:
            raise ValueError(f"route {template!r}: only whole-segment str parameters go direct")
        else:
            literals.append(part)
    return tuple(literals), tuple(names)


def _compile(method: str, path: str, handler: Handler) -> Route:
    literals, names = _segments(path)
    params = inspect.signature(handler).parameters
    extra = set(params) - {"request"} - set(names)
    if extra or "request" not in params:
        raise ValueError(f"route {path!r}: its handler must take (request, path params)")
    kwargs = tuple(n for n in names if n in params)
    return Route(method, literals, names, handler, kwargs)


class HotRoutes:
    """``routes``, each (method, path template, handler) below ``prefix``, straight to their
    handlers."""

    def __init__(
        self, prefix: str, routes: Iterable[tuple[str, str, Handler]], on_error: ErrorResponder
    ) -> None:
        #: ``SKIFF_LB_DOMAIN``: a request for a host under it is never a hot route's.
        self.lb_domain: str | None = None
        #: The load-balancing endpoints' proxy (``api/lb.py``), which the fast protocol calls
        #: straight for their requests: an ASGI app reading ``path_params`` (``endpoint_id``,
        #: ``path``). None: those requests take the full app.
        self.lb: ASGIApp | None = None
        #: The mount point, e.g. ``/v2``: what a request's ``root_path`` gains.
        self.root = prefix.rstrip("/")
        self.prefix = self.root + "/"
        self.on_error = on_error
        # Keyed by (method, segment count, where the first literal segment is, what it says):
        # a dict lookup per possible position finds the only candidate, so no path is matched
        # against every route.
        self._table: dict[tuple[str, int, int, str], Route] = {}
        for method, path, handler in routes:
            route = _compile(method, path, handler)
            at = next((i for i, s in enumerate(route.literals) if s is not None), -1)
            if at < 0:
                raise ValueError(f"route {path!r} has no literal segment")
            key = (route.method, len(route.literals), at, route.literals[at] or "")
            if key in self._table:
                raise ValueError(f"two direct routes share the shape {key}")
            self._table[key] = route
        self._positions = sorted({key[2] for key in self._table})

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route ``method`` and the full ``path`` name, with its path parameters."""
        if not path.startswith(self.prefix) or "\x00" in path:
            # A NUL names nothing: the full app answers it (api/nul.py).
            return None
        parts = path[len(self.prefix) :].split("/")
        for at in self._positions:
            if at >= len(parts):
                break
            route = self._table.get((method, len(parts), at, parts[at]))
            if route is not None and _fits(route, parts):
                values = (p for p, lit in zip(parts, route.literals, strict=True) if lit is None)
                return route, dict(zip(route.names, values, strict=True))
        return None

    def match_lb(self, method: str, path: str, host_endpoint: str | None) -> dict[str, str] | None:
        """The path parameters of a load-balancing endpoint's request, as its routes in
        ``api/lb.py`` would give them (``/lb/{endpoint_id}`` and ``/lb/{endpoint_id}/{path}``,
        or any path for a host naming the endpoint: ``host_endpoint``); None when the request
        is not one, or is left to the full app (another method, a NUL)."""
        if self.lb is None or method not in LB_METHODS or "\x00" in path:
            return None
        if host_endpoint is not None:
            return {"endpoint_id": host_endpoint, "path": path[1:]}
        if not path.startswith(LB_PREFIX + "/"):
            return None
        endpoint_id, _, rest = path[len(LB_PREFIX) + 1 :].partition("/")
        return {"endpoint_id": endpoint_id, "path": rest} if endpoint_id else None

    async def call(self, route: Route, request: Request, params: dict[str, str]) -> Response:
        """The route's answer: its handler's, or its error's as the app's handlers give it."""
        try:
            return await route.handler(request, **{k: params[k] for k in route.kwargs})
        except Exception as exc:
            return await self.on_error(request, exc)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Serve the request when it is for one of the routes; whether it was."""
        if scope["type"] != "http":
            return False
        found = self.match(scope["method"], scope["path"])
        if found is None:
            return False
        route, params = found
        # What the mount and the route would have added to the scope.
        scope = {
            **scope,
            "root_path": scope.get("root_path", "") + self.root,
            "path_params": params,
            "endpoint": route.handler,
        }
        request = Request(scope, receive)
        response = await self.call(route, request, params)
        await response(scope, receive, send)
        return True


def _fits(route: Route, parts: list[str]) -> bool:
    for part, literal in zip(parts, route.literals, strict=True):
        if literal is None:
            if not part:
                return False
        elif part != literal:
            return False
    return True


class WithHotRoutes(Starlette):
    """A Starlette app that first offers each request to its ``hot`` routes."""

    hot: HotRoutes | None = None
    #: ``SKIFF_LB_DOMAIN``: requests to ``{endpoint_id}.{domain}`` go to that load-balancing
    #: endpoint, whatever their path (``api/lb.py``).
    lb_domain: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = nul_refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            if self.lb_domain is not None:
                routed = host_routed(scope, self.lb_domain)
                if routed is not None:
                    await super().__call__(routed, receive, send)
                    return
        if self.hot is not None and await self.hot.handle(scope, receive, send):
            return
        await super().__call__(scope, receive, send)
