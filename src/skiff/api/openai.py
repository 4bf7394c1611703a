"""``/v2/{endpoint_id}/openai/v1/...``: OpenAI-compatible routes, each call wrapped as a job.

The job's input is ``{"openai_route": "/v1/chat/completions", "openai_input": <body>}`` (no
``openai_input`` for a GET), which is what OpenAI-compatible workers (vLLM and the like)
expect. Without ``"stream": true`` the answer is the job's output as the response body; with
it, the chunks the worker yields are relayed as ``text/event-stream`` as they arrive (a string
chunk as it is, since such workers yield ready ``data: ...`` lines; any other value as a
``data:`` line of JSON), and the stream ends when the job does. The handlers; their paths,
methods and OpenAPI descriptions are declared in api/v2.py.
"""

import contextlib
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from skiff.api import access
from skiff.api.body import read_body
from skiff.api.hot import Handler
from skiff.api.responses import json_response
from skiff.domain import json_limits
from skiff.domain.endpoints import Endpoint
from skiff.errors import Invalid
from skiff.services.hub import Services
from skiff.services.openai_calls import Ending

BODY_LIMIT = 20 * 1024 * 1024


def _sse(output_json: str) -> bytes:
    value = orjson.loads(output_json)
    if isinstance(value, str):
        return value.encode() if value.endswith("\n\n") else (value + "\n\n").encode()
    return b"data: " + output_json.encode() + b"\n\n"


def _answer(output_json: str | None) -> bytes:
    """A generator handler's output is the list of what it yielded (return_aggregate_stream);
    an OpenAI answer is one object, so a list of exactly one is unwrapped."""
    if output_json is None:
        return b"null"
    value = orjson.loads(output_json)
    if isinstance(value, list) and len(value) == 1:
        return orjson.dumps(value[0])
    return output_json.encode()


async def _gone(request: Request) -> None:
    """Return once the client has disconnected. What ``receive`` offers before that is the
    body (already read, or none): nothing else can come on this request."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class OpenAIHandlers(NamedTuple):
    chat_completions: Handler
    completions: Handler
    models: Handler


def build(services: Services) -> OpenAIHandlers:
    calls = services.openai_calls

    async def relay(endpoint: Endpoint, job_id: str) -> AsyncIterator[bytes]:
        # Closed with this generator, so a client that went away cancels the job at once.
        async with contextlib.aclosing(calls.events(endpoint, job_id)) as events:
            async for event in events:
                if event.output_json is not None:
                    yield _sse(event.output_json)
                else:
                    yield b"data: " + orjson.dumps({"error": {"message": event.error}}) + b"\n\n"

    async def call(request: Request, route: str, with_body: bool) -> Response:
        async with access.admitted(services, request, "openai") as endpoint:
            body: dict[str, Any] | None = None
            if with_body:
                raw = await read_body(request, BODY_LIMIT)
                try:
                    doc, too_deep = json_limits.loads(raw)
                except orjson.JSONDecodeError:
                    raise Invalid("the body is not valid JSON", field="body") from None
                if too_deep:
                    raise Invalid(f"the body is {json_limits.TOO_DEEP}", field="body")
                if not isinstance(doc, dict):
                    raise Invalid("the body must be a JSON object", field="body")
                body = doc
            job = await calls.start(endpoint, route, body)
            if body is not None and body.get("stream") is True:
                return StreamingResponse(relay(endpoint, job.id), media_type="text/event-stream")
            # Returning ends the caller's ``admitted`` (freeing its concurrency slot) as soon
            # as the client leaves, not after the whole wait.
            outcome = await calls.outcome(endpoint, job, lambda: _gone(request))
            if outcome.ending is Ending.LEFT:
                # nobody to answer; 499 as proxies log a client that left
                return Response(status_code=499)
            if outcome.ending is Ending.ANSWERED:
                return Response(_answer(outcome.job.output_json), media_type="application/json")
            status = 502 if outcome.ending is Ending.FAILED else 504
            return json_response({"error": outcome.error, "id": job.id}, status)

    async def chat_completions(request: Request) -> Response:
        return await call(request, "/v1/chat/completions", with_body=True)

    async def completions(request: Request) -> Response:
        return await call(request, "/v1/completions", with_body=True)

    async def models(request: Request) -> Response:
        return await call(request, "/v1/models", with_body=False)

    return OpenAIHandlers(chat_completions, completions, models)
