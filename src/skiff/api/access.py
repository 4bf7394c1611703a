"""Who may call a job route, and within which limits: one place for every ``/v2`` client route."""

import contextlib
from collections.abc import AsyncIterator

from starlette.requests import Request

from skiff.domain.endpoints import Endpoint
from skiff.services.hub import Services


@contextlib.asynccontextmanager
async def admitted(services: Services, request: Request, operation: str) -> AsyncIterator[Endpoint]:
    """The caller's endpoint, inside its rate limits for this operation (429 beyond)."""
    user = await services.auth.authenticate(request.headers.get("authorization"))
    endpoint = await services.endpoints.for_jobs(user, request.path_params["endpoint_id"])
    running = await services.workers.live_count(endpoint.id)
    async with services.rate_limits.admit(user.id, endpoint.id, operation, running):
        yield endpoint
