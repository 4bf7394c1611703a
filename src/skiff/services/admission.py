"""Who may call a job route, and within which limits: the caller's key, its endpoint, and a
place within the endpoint's rate limits for the operation (429 beyond)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Final

from attrs import define

from skiff.domain.endpoints import Endpoint
from skiff.domain.permissions import Access
from skiff.services.auth import Auth
from skiff.services.endpoints import Endpoints
from skiff.services.ratelimits import BASE_LIMITS, RateLimits
from skiff.services.workers import Workers

#: How a refusal names each operation, so a person can tell which route was refused.
_NAMED: Final[dict[str, str]] = {op: f"/{op}" for op in BASE_LIMITS} | {"openai": "/openai/*"}


@define(eq=False, repr=False, slots=False)
class Admission:
    _auth: Auth
    _endpoints: Endpoints
    _workers: Workers
    _limits: RateLimits

    def admit(self, key: str, endpoint_id: str, operation: str, access: Access) -> Admitted:
        """``async with`` it: the endpoint ``endpoint_id`` of the user of ``key``, if the key
        may ``access`` it (401 naming the missing permission else), inside its rate limits for
        ``operation`` until the block ends."""
        return Admitted(self, key, endpoint_id, operation, access)


class Admitted:
    """A plain class rather than ``@asynccontextmanager``: every job request enters it, and a
    generator-based context manager (two, with the rate limits' own) was a measurable share of
    a ``/run`` (docs/performance.md). With the limits off there is nothing to slot and nothing
    to count."""

    __slots__ = ("_access", "_admission", "_endpoint_id", "_key", "_operation", "_slot")

    def __init__(
        self, admission: Admission, key: str, endpoint_id: str, operation: str, access: Access
    ) -> None:
        self._admission = admission
        self._access = access
        self._key = key
        self._endpoint_id = endpoint_id
        self._operation = operation
        self._slot: AbstractAsyncContextManager[None] | None = None

    async def __aenter__(self) -> Endpoint:
        admission = self._admission
        caller = await admission._auth.caller(self._key)
        # Checked before the endpoint is looked up: the refusal is the same whether it exists.
        caller.check(self._access, self._endpoint_id)
        user = caller.user
        endpoint = await admission._endpoints.for_jobs(user, self._endpoint_id)
        limits = admission._limits
        if limits.enabled:
            operation = self._operation
            running = await admission._workers.live_count(endpoint.id)
            slot = limits.admit(
                user.id, endpoint.id, operation, running, _NAMED.get(operation, operation)
            )
            await slot.__aenter__()
            self._slot = slot
        return endpoint

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._slot is not None:
            await self._slot.__aexit__(exc_type, exc, tb)
