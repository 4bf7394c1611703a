"""Who may call a job route, and within which limits: one place for every ``/v2`` client route."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from types import TracebackType

from starlette.requests import Request

from skiff.domain.endpoints import Endpoint
from skiff.services.hub import Services


class admitted:  # lower case: used as ``async with admitted(...)``, like a function
    """The caller's endpoint, inside its rate limits for this operation (429 beyond).

    A plain class rather than ``@asynccontextmanager``: every job request enters it, and a
    generator-based context manager (two, with the rate limits' own) was a measurable share of
    a ``/run`` (docs/performance.md). With the limits off there is nothing to hold and nothing
    to count."""

    __slots__ = ("_hold", "_operation", "_request", "_services")

    def __init__(self, services: Services, request: Request, operation: str) -> None:
        self._services = services
        self._request = request
        self._operation = operation
        self._hold: AbstractAsyncContextManager[None] | None = None

    async def __aenter__(self) -> Endpoint:
        services = self._services
        # The key alone works too on /v2, as in the hosted platform's examples.
        headers = self._request.headers
        user = await services.auth.authenticate(headers.get("authorization"), bare_ok=True)
        endpoint = await services.endpoints.for_jobs(user, self._request.path_params["endpoint_id"])
        limits = services.rate_limits
        if limits.enabled:
            running = await services.workers.live_count(endpoint.id)
            hold = limits.admit(user.id, endpoint.id, self._operation, running)
            await hold.__aenter__()
            self._hold = hold
        return endpoint

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._hold is not None:
            await self._hold.__aexit__(exc_type, exc, tb)
