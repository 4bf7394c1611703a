"""JSON responses rendered with orjson (fast, and it passes stored JSON through as fragments)."""

from __future__ import annotations

from typing import Any, Final

import orjson
from starlette.responses import Response


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json")


#: FastAPI's built-in OpenTelemetry, off: skiff reports through its own Prometheus metrics,
#: and checking for a configured provider on every request was a measurable share of a ``/run``
#: (docs/performance.md).
NO_TELEMETRY: Final[dict[str, bool]] = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
}
