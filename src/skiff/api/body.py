"""Reading a request body under a size limit, decided before the whole body is in memory."""

from __future__ import annotations

from starlette.requests import Request

from skiff.body_gate import too_large
from skiff.errors import Invalid

#: The scope's key for a body already read whole (the fast protocol reads it before the
#: handler runs, ``api/lean_http.py``): taken as it is, without ``Request.stream``'s
#: generator and its ``receive`` round.
WHOLE_BODY = "skiff.body"


async def read_body(request: Request, limit: int) -> bytes:
    whole: bytes | None = request.scope.get(WHOLE_BODY)
    if whole is not None:
        if len(whole) > limit:
            raise too_large(limit)
        return whole
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise too_large(limit)
        except ValueError:
            raise Invalid("invalid Content-Length header", field="Content-Length") from None
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)
