"""Requests naming something with a NUL character in it: never an id, never storable.

PostgreSQL text cannot hold NUL, so such a path or query reached the database as a statement
error (a 500). No id skiff gives out holds one, so a path with NUL names nothing (404), and a
query parameter with one is refused (400), before any route sees them.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Scope

from skiff.api.errors import error_body
from skiff.api.responses import json_response


def nul_refusal(scope: Scope) -> Response | None:
    """The answer to an HTTP request whose path or query string holds NUL; None otherwise."""
    path: str = scope["path"]
    in_path = "\x00" in path
    if not in_path and b"%00" not in scope.get("query_string", b""):
        return None
    # Each interface's own error shape: /v1 says "message", /v2 "error".
    key = "message" if path.startswith("/v1") else "error"
    if in_path:
        return json_response(error_body(key, "not found: no id holds a NUL character"), 404)
    message = "a query parameter holds a NUL character"
    return json_response(error_body(key, message, "query"), 400)
