"""JSON responses rendered with orjson (fast, and it passes stored JSON through as fragments)."""

from __future__ import annotations

from typing import Any, Final

import orjson
from starlette.responses import Response


class JsonResponse(Response):
    """``content`` as JSON, its two headers made directly: Starlette's ``__init__`` renders
    through ``render`` and ``init_headers``, which look for given headers and a charset to
    add, on every answer (docs/performance.md)."""

    media_type = "application/json"

    def __init__(self, content: Any, status_code: int = 200) -> None:
        self.status_code = status_code
        self.background = None
        self.body = body = orjson.dumps(content)
        self.raw_headers = [
            (b"content-length", str(len(body)).encode("latin-1")),
            (b"content-type", b"application/json"),
        ]


def json_response(content: Any, status_code: int = 200) -> Response:
    return JsonResponse(content, status_code)


#: FastAPI's built-in OpenTelemetry, off: skiff reports through its own Prometheus metrics,
#: and checking for a configured provider on every request was a measurable share of a ``/run``
#: (docs/performance.md).
NO_TELEMETRY: Final[dict[str, bool]] = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
}
