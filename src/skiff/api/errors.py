"""The one place where the exception tree becomes HTTP.

Error bodies: ``{"message": ...}`` on ``/v1`` (the management reference's shape) and
``{"error": ...}`` on ``/v2`` (the job interface's); both add ``field`` when one field is at fault.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from skiff.api.responses import json_response
from skiff.errors import Invalid, SkiffError, TooManyRequests
from skiff.services.outages import database_unreachable

log = logging.getLogger(__name__)


def error_body(key: str, message: str, field: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {key: message}
    if field:
        body["field"] = field
    return body


def _describe_validation(exc: RequestValidationError) -> tuple[str, str | None]:
    parts = []
    first_field = None
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(loc) if loc else None
        if first_field is None:
            first_field = field
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        parts.append(f"{field}: {msg}" if field else msg)
    return "; ".join(parts) or "invalid request", first_field


ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


def handlers(key: str) -> dict[type[Exception], ErrorHandler]:
    """Exception class -> its answer, with ``key`` naming the message field."""

    async def skiff_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SkiffError)
        field = exc.field if isinstance(exc, Invalid) else None
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        if isinstance(exc, TooManyRequests):
            headers = {"Retry-After": str(exc.retry_after)}
        response = json_response(error_body(key, exc.message, field), exc.status_code)
        if headers:
            response.headers.update(headers)
        return response

    async def validation_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        message, field = _describe_validation(exc)
        return json_response(error_body(key, message, field), 400)

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return json_response(error_body(key, str(exc.detail)), exc.status_code)

    async def unexpected(_request: Request, exc: Exception) -> Response:
        if database_unreachable(exc):
            # Nothing was lost: what was accepted is committed, and the caller may retry.
            log.warning("the database is unreachable: %r", exc)
            response = json_response(
                error_body(key, "the database is unreachable right now; try again shortly"), 503
            )
            response.headers["Retry-After"] = "1"
            return response
        log.exception("unhandled error", exc_info=exc)
        return json_response(error_body(key, "internal server error"), 500)

    return {
        SkiffError: skiff_error,
        RequestValidationError: validation_error,
        HTTPException: http_error,
        Exception: unexpected,
    }


def install(app: Any, key: str) -> None:
    for exc_class, handler in handlers(key).items():
        app.add_exception_handler(exc_class, handler)


def responder(key: str) -> ErrorHandler:
    """One function answering any exception as ``install`` makes an app answer it: the handler
    of the exception's nearest class, as Starlette looks it up."""
    table = handlers(key)

    async def respond(request: Request, exc: Exception) -> Response:
        for cls in type(exc).__mro__:
            if cls in table:
                return await table[cls](request, exc)
        raise exc  # not an Exception: let it go on

    return respond
