"""The project's exception tree, mapped to HTTP in one place (``api/errors.py``).

SkiffError
├── NotFound            404: unknown id, or another user's
├── Invalid             400: a bad field or request; ``field`` names it
├── Conflict            409: a unique name already taken, a resource still in use
├── Unauthorized        401: missing or unknown key
├── Forbidden           403: a known caller, not allowed this (not an administrator, ...)
├── PayloadTooLarge     413: a body over the limit of its route
├── TooManyRequests     429: over a rate or concurrency limit; ``retry_after`` seconds
│   ├── NoWorkerReady   503: a load-balancing endpoint has no worker ready in time
│   └── EndpointBusy    503: a load-balancing endpoint has its cap of requests in flight
│                       (services/lb_proxy.py)
├── BadGateway          502: a load-balancing worker failed the request passed to it
└── InsufficientStorage 507: the server's disk has no room for new work; ``retry_after``
                        seconds (services/disk_reserve.py)
"""

from __future__ import annotations


class SkiffError(Exception):
    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(SkiffError):
    status_code = 404


class Invalid(SkiffError):
    status_code = 400

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Conflict(SkiffError):
    status_code = 409


class Unauthorized(SkiffError):
    status_code = 401


class Forbidden(SkiffError):
    status_code = 403


class PayloadTooLarge(SkiffError):
    status_code = 413


class TooManyRequests(SkiffError):
    """Over a rate limit; ``retry_after`` (whole seconds, at least 1) becomes ``Retry-After``."""

    status_code = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        # A client told to retry after 0 s would retry at once and be refused again.
        self.retry_after = max(1, retry_after)


class NoWorkerReady(TooManyRequests):
    """No worker of a load-balancing endpoint became ready in time: 503 with
    ``Retry-After``, as a busy upstream answers."""

    status_code = 503


class BadGateway(SkiffError):
    """The worker a request was passed to failed it (refused, reset, died mid-way)."""

    status_code = 502


class InsufficientStorage(SkiffError):
    """The disk the database is on is (nearly) full: new work is refused, with
    ``Retry-After``, so that what was accepted can still be finished and recorded."""

    status_code = 507

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)
