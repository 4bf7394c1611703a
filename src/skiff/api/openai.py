"""``/v2/{endpoint_id}/openai/v1/...``: OpenAI-compatible routes, each call wrapped as a job.

The job's input is ``{"openai_route": "/v1/chat/completions", "openai_input": <body>}`` (no
``openai_input`` for a GET), which is what OpenAI-compatible workers (vLLM and the like)
expect. Without ``"stream": true`` the answer is the job's output as the response body; with
it, the chunks the worker yields are relayed as ``text/event-stream`` as they arrive (a string
chunk as it is, since such workers yield ready ``data: ...`` lines; any other value as a
``data:`` line of JSON), and the stream ends when the job does. The handlers; their paths,
methods and OpenAPI descriptions are declared in api/v2.py.

Failures answer in OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``),
so the ``openai`` client shows the worker's words. A job that failed or is still running is
answered with ``x-should-retry: false``, which OpenAI's clients honour: retrying would run the
request again. A worker that names a status in its error (``{"status": 429, ...}``) gets it, and
its client's own retry rules.
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
from skiff.api.needs import needs
from skiff.closing_stream import ClosingStream
from skiff.domain import json_limits, streams
from skiff.domain.endpoints import Endpoint
from skiff.errors import Invalid
from skiff.services.hub import Services
from skiff.services.openai_calls import Ending

BODY_LIMIT = 20 * 1024 * 1024


def openai_error(
    message: str, kind: str, code: str, status: int, retry: bool | None = None
) -> Response:
    """An answer in OpenAI's error shape; ``retry`` False adds ``x-should-retry: false``."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    headers = {"x-should-retry": "false"} if retry is False else None
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")


def worker_failure(error: str | None, job_id: str) -> Response:
    """A failed job as an OpenAI error: the worker's message (from the runpod SDK's error JSON,
    or the text as it is), at the status the worker named, else 500 not to be retried."""
    message, status = error or "the worker failed the request", None
    try:
        parsed = orjson.loads(message)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        named = parsed.get("status", parsed.get("status_code", parsed.get("code")))
        if isinstance(named, int) and not isinstance(named, bool) and 400 <= named <= 599:
            status = named
        for key in ("error_message", "message", "error"):
            if isinstance(parsed.get(key), str) and parsed[key]:
                message = parsed[key]
                break
    reply = openai_error(
        message, "worker_error", "worker_failed", status or 500, None if status else False
    )
    reply.headers["x-skiff-job-id"] = job_id
    return reply


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
    model: Handler
    embeddings: Handler
    unknown: Handler


def build(services: Services) -> OpenAIHandlers:
    calls = services.openai_calls

    async def relay(endpoint: Endpoint, job_id: str) -> AsyncIterator[bytes]:
        # Closed with this generator, so a client that went away cancels the job at once.
        async with contextlib.aclosing(calls.events(endpoint, job_id)) as events:
            held: list[str] = []  # the pieces so far of one event the store split (streams.py)
            async for event in events:
                if event.output_json is not None:
                    if streams.is_split_piece(event.output_json):
                        held.append(orjson.loads(event.output_json))
                        continue
                    if held:
                        held.append(orjson.loads(event.output_json))
                        whole = orjson.dumps("".join(held)).decode()
                        held = []
                        yield _sse(whole)
                        continue
                    yield _sse(event.output_json)
                else:
                    error = {
                        "message": event.error,
                        "type": "worker_error",
                        "code": "worker_failed",
                    }
                    yield b"data: " + orjson.dumps({"error": error}) + b"\n\n"

    async def call(request: Request, route: str, with_body: bool) -> Response:
        async with contextlib.AsyncExitStack() as admission:
            endpoint = await admission.enter_async_context(
                access.admitted(services, request, "openai")
            )
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
                # The caller's concurrency slot goes with the stream and is let go when it
                # ends: a stream lasts as long as its job, and was not counted at all.
                held = ClosingStream(relay(endpoint, job.id), admission.pop_all())
                return StreamingResponse(held, media_type="text/event-stream")
            # Returning ends the caller's ``admitted`` (freeing its concurrency slot) as soon
            # as the client leaves, not after the whole wait.
            outcome = await calls.outcome(endpoint, job, lambda: _gone(request))
            if outcome.ending is Ending.LEFT:
                # nobody to answer; 499 as proxies log a client that left
                return Response(status_code=499)
            if outcome.ending is Ending.ANSWERED:
                return Response(_answer(outcome.job.output_json), media_type="application/json")
            if outcome.ending is Ending.FAILED:
                return worker_failure(outcome.error, job.id)
            reply = openai_error(
                f"{outcome.error} (job {job.id})", "timeout", "no_answer", 504, retry=False
            )
            reply.headers["x-skiff-job-id"] = job.id
            return reply

    @needs(access.NEEDS["openai"])
    async def chat_completions(request: Request) -> Response:
        return await call(request, "/v1/chat/completions", with_body=True)

    @needs(access.NEEDS["openai"])
    async def completions(request: Request) -> Response:
        return await call(request, "/v1/completions", with_body=True)

    @needs(access.NEEDS["openai"])
    async def models(request: Request) -> Response:
        return await call(request, "/v1/models", with_body=False)

    @needs(access.NEEDS["openai"])
    async def model(request: Request) -> Response:
        """One model (the client's ``models.retrieve``), as the worker answers it."""
        name = request.path_params["model"]
        return await call(request, f"/v1/models/{name}", with_body=False)

    @needs(access.NEEDS["openai"])
    async def embeddings(request: Request) -> Response:
        return await call(request, "/v1/embeddings", with_body=True)

    @needs(access.NEEDS["openai"])
    async def unknown(request: Request) -> Response:
        """Any other OpenAI route: a 404 in OpenAI's shape, so a client says what is missing."""
        async with access.admitted(services, request, "openai"):
            path = request.path_params["path"]
            return openai_error(
                f"/v1/{path} is not served here: this endpoint relays chat/completions, "
                "completions, embeddings and models to its workers",
                "invalid_request_error",
                "unknown_url",
                404,
            )

    return OpenAIHandlers(chat_completions, completions, models, model, embeddings, unknown)
