"""JSON responses rendered with orjson (fast, and it passes stored JSON through as fragments)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json")
