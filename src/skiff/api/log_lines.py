"""Log lines as the logs routes send them (an endpoint's workers', a pod's): one JSON object a
line, and a followed log as an ``application/x-ndjson`` stream."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import Query
from pydantic import BaseModel, Field
from starlette.responses import Response, StreamingResponse

from skiff.api.credentials import api_key
from skiff.api.responses import json_response
from skiff.domain.keys import hash_key
from skiff.domain.logs import LogLine, iso, parse_time
from skiff.domain.permissions import Access
from skiff.errors import Invalid
from skiff.services.auth import Auth
from skiff.services.log_reader import MAX_READ_CHARS
from skiff.services.logs import Batches, Relayed, StillAllowed


class LogLineOut(BaseModel):
    worker: str = Field(description="The worker id (a pod's log: the pod's id)")
    time: str | None = Field(
        description="When skiff read the line from the worker (ISO-8601, UTC, milliseconds); "
        "null for lines written before skiff stamped them"
    )
    line: str = Field(description="The line as the worker printed it, without its newline")


class LogsOut(BaseModel):
    lines: list[LogLineOut] = Field(description="Oldest first")


#: The logs routes' query parameters.
Since = Annotated[
    str | None,
    Query(
        description="Only lines from this time on: ISO-8601 (UTC if it names no zone) "
        "or epoch seconds"
    ),
]
Tail = Annotated[
    int,
    Query(
        ge=1,
        le=10000,
        description="At most this many last lines, and at most "
        f"{MAX_READ_CHARS // (1024 * 1024)} MiB of their text: the newest lines that fit",
    ),
]
Follow = Annotated[
    bool,
    Query(
        description="Keep the response open and send new lines as they are written, as "
        "`application/x-ndjson`: the last `tail` lines first, then one JSON object per new line "
        "(an empty line now and then while there are none). It ends when the client disconnects "
        "or the endpoint or pod is deleted."
    ),
]

#: The logs routes' answer, as OpenAPI says it: JSON, or with ``follow`` a stream of lines.
FOLLOWED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The lines (with `follow`: a stream of them, one JSON object per line)",
        "content": {
            "application/x-ndjson": {"schema": {"$ref": "#/components/schemas/LogLineOut"}}
        },
    },
    429: {
        "description": "With `follow`: the key's user follows 16 logs on this server already "
        "(services/follow_slots.py); `Retry-After` says when to try again",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}},
    },
}


def parse_since(since: str | None) -> float | None:
    try:
        return parse_time(since) if since is not None else None
    except ValueError:
        raise Invalid("since: expected an ISO-8601 time or epoch seconds", field="since") from None


def log_line(line: LogLine) -> dict[str, Any]:
    return {
        "worker": line.worker,
        "time": iso(line.time) if line.time is not None else None,
        "line": line.line,
    }


def lines_json(lines: list[LogLine]) -> Response:
    """A log read once: ``{"lines": [...]}``, oldest first."""
    return json_response({"lines": [log_line(line) for line in lines]})


def ndjson(lines: list[LogLine]) -> bytes:
    return b"".join(orjson.dumps(log_line(line)) + b"\n" for line in lines)


async def _chunks(batches: Batches) -> AsyncIterator[bytes]:
    # An empty batch is a keep-alive: an empty line, which clients skip.
    async with contextlib.aclosing(batches):
        async for lines in batches:
            yield ndjson(lines) if lines else b"\n"


def ndjson_stream(followed: Batches | Relayed) -> StreamingResponse:
    """A followed log: batches of lines from here, or what another replica relays."""
    return StreamingResponse(
        followed.chunks if isinstance(followed, Relayed) else _chunks(followed),
        media_type="application/x-ndjson",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def key_still_reads(auth: Auth, authorization: str | None, endpoint_id: str | None) -> StillAllowed:
    """Whether the API key a followed log was opened with may still read it, read from the
    store each time it is asked (not the key cache): a key revoked, or its user disabled, ends
    the follow within seconds (``services/logs.py`` ``followed``)."""
    digest = hash_key(api_key(authorization))

    async def reads() -> bool:
        caller = await auth.caller_of_digest(digest)
        return caller is not None and caller.permissions.missing(Access.READ, endpoint_id) is None

    return reads
