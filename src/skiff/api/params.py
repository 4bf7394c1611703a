"""Reading a request's query parameters without parsing an empty query string."""

from __future__ import annotations

from starlette.requests import Request


def query(request: Request, name: str) -> str | None:
    """The query parameter ``name``, or None. Most job requests carry no query string at all;
    building Starlette's ``QueryParams`` for one anyway was a twentieth of a ``/status``."""
    if not request.scope.get("query_string"):
        return None
    return request.query_params.get(name)
