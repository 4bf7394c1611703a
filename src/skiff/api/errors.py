"""The one place where the exception tree becomes HTTP.

Error bodies: ``{"message": ...}`` on ``/v1`` (the management reference's shape) and
``{"error": ...}`` on ``/v2`` (the job interface's); both add ``field`` when one field is at fault.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from skiff.api.responses import json_response
from skiff.errors import InsufficientStorage, Invalid, SkiffError, TooManyRequests
from skiff.services.disk_reserve import RETRY_AFTER_SECONDS
from skiff.services.outages import database_unreachable, storage_full

log = logging.getLogger(__name__)


def error_body(key: str, message: str, field: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {key: message}
    if field:
        body["field"] = field
    return body


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _body_not_json(request: Request, exc: RequestValidationError) -> str | None:
    """Why a body was refused whole when it was not sent as JSON: FastAPI reads a body as JSON
    only under a JSON ``Content-Type`` (curl's ``-d`` sends a form's), and pydantic then says
    only "Input should be a valid dictionary", which names neither the header nor the fix."""
    content_type = request.headers.get("content-type")
    if _is_json(content_type):
        return None
    whole = [e for e in exc.errors() if tuple(e.get("loc", ())) == ("body",)]
    if not whole or all(e.get("type") == "missing" for e in whole):
        return None
    sent = f"this request's is {content_type!r}" if content_type else "this request has none"
    return f"send the body as JSON with the header 'Content-Type: application/json' ({sent})"


def _model_at(request: Request, path: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model of the route's body at ``path`` (field names), if one is there."""
    field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    for part in path:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        info = model.model_fields.get(str(part))
        model = info.annotation if info is not None else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unknown_field(request: Request, loc: Sequence[str | int]) -> str:
    """What to say of a field the body's model does not have: the close name it may mean."""
    model = _model_at(request, loc[1:-1])
    known = [info.alias or name for name, info in model.model_fields.items()] if model else []
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    return f"unknown field; did you mean '{close[0]}'?" if close else "unknown field"


def _describe_validation(request: Request, exc: RequestValidationError) -> tuple[str, str | None]:
    parts = []
    first_field = None
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(loc) if loc else None
        if first_field is None:
            first_field = field
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden" and tuple(err.get("loc", ()))[:1] == ("body",):
            msg = _unknown_field(request, err["loc"])
        parts.append(f"{field}: {msg}" if field else msg)
    return "; ".join(parts) or "invalid request", first_field


ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


def handlers(key: str) -> dict[type[Exception], ErrorHandler]:
    """Exception class -> its answer, with ``key`` naming the message field."""

    async def skiff_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SkiffError)
        field = exc.field if isinstance(exc, Invalid) else None
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        if isinstance(exc, (TooManyRequests, InsufficientStorage)):
            headers = {"Retry-After": str(exc.retry_after)}
        response = json_response(error_body(key, exc.message, field), exc.status_code)
        if headers:
            response.headers.update(headers)
        return response

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        not_json = _body_not_json(request, exc)
        if not_json is not None:
            return json_response(error_body(key, not_json, "Content-Type"), 400)
        message, field = _describe_validation(request, exc)
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
        if storage_full(exc):
            # The write was not made: nothing of this request was kept, and what was accepted
            # before is committed. The operator has to free space (docs/deployment.md).
            log.error("the database's disk is full: %r", exc)
            message = "the server's disk is full: nothing of this request was kept; try again later"
            response = json_response(error_body(key, message), InsufficientStorage.status_code)
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
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
