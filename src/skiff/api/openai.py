"""``/v2/{endpoint_id}/openai/v1/...``: OpenAI-compatible routes, each call wrapped as a job.

The job's input is ``{"openai_route": "/v1/chat/completions", "openai_input": <body>}`` (no
``openai_input`` for a GET), which is what OpenAI-compatible workers (vLLM and the like)
expect. Without ``"stream": true`` the answer is the job's output as the response body; with
it, the chunks the worker yields are relayed as ``text/event-stream`` as they arrive (a string
chunk as it is, since such workers yield ready ``data: ...`` lines; any other value as a
``data:`` line of JSON), and the stream ends when the job does. The handlers; their paths,
methods and OpenAPI descriptions are declared in api/v2.py.
"""

import asyncio
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
from skiff.domain.jobs import FINAL_STATES, Job, JobStatus
from skiff.errors import Invalid
from skiff.services.hub import Services

BODY_LIMIT = 20 * 1024 * 1024
#: How long a non-streaming call waits for its job, like the longest ``/runsync`` wait.
WAIT_SECONDS = 300.0


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
    jobs = services.jobs

    async def answer_or_leave(request: Request, endpoint: Endpoint, job_id: str) -> Job | None:
        """The job once final (or as it is after ``WAIT_SECONDS``); None if the client went
        away first. Its answer is then no longer wanted: the job is cancelled (freeing the
        worker), and returning ends the caller's ``admitted`` (freeing its concurrency slot)
        at once instead of after the whole wait."""
        waiting = asyncio.ensure_future(jobs.wait_until_final(endpoint, job_id, WAIT_SECONDS))
        leaving = asyncio.ensure_future(_gone(request))
        try:
            await asyncio.wait((waiting, leaving), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            leaving.cancel()
        if waiting.done() and not waiting.cancelled():
            return waiting.result()
        await jobs.cancel(endpoint, job_id)
        return None

    async def relay(endpoint: Endpoint, job_id: str) -> AsyncIterator[bytes]:
        finished = False
        try:
            async for read in jobs.follow_stream(endpoint, job_id):
                for chunk in read.chunks:
                    yield _sse(chunk.output_json)
                if read.job.status in FINAL_STATES and not read.chunks:
                    finished = True
                    if read.job.status is not JobStatus.COMPLETED:
                        error = read.job.error or read.job.status.value
                        yield b"data: " + orjson.dumps({"error": {"message": error}}) + b"\n\n"
        finally:
            if not finished:
                # The client went away: its answer is no longer wanted, so free the worker.
                await jobs.cancel(endpoint, job_id)

    async def call(request: Request, route: str, with_body: bool) -> Response:
        async with access.admitted(services, request, "openai") as endpoint:
            job_input: dict[str, Any] = {"openai_route": route}
            stream = False
            if with_body:
                raw = await read_body(request, BODY_LIMIT)
                try:
                    body, too_deep = json_limits.loads(raw)
                except orjson.JSONDecodeError:
                    raise Invalid("the body is not valid JSON", field="body") from None
                if too_deep:
                    raise Invalid(f"the body is {json_limits.TOO_DEEP}", field="body")
                if not isinstance(body, dict):
                    raise Invalid("the body must be a JSON object", field="body")
                job_input["openai_input"] = body
                stream = body.get("stream") is True
            job = await jobs.submit(
                endpoint, orjson.dumps({"input": job_input}), sync=True, wait_ms=300_000
            )
            if stream:
                return StreamingResponse(relay(endpoint, job.id), media_type="text/event-stream")
            final = await answer_or_leave(request, endpoint, job.id)
            if final is None:  # nobody to answer; 499 as proxies log a client that left
                return Response(status_code=499)
            job = final
            if job.status is JobStatus.COMPLETED:
                return Response(_answer(job.output_json), media_type="application/json")
            if job.status in FINAL_STATES:
                return json_response(
                    {"error": job.error or f"the job ended {job.status.value}", "id": job.id}, 502
                )
            return json_response(
                {"error": "no answer from a worker within 300 s; the job goes on", "id": job.id},
                504,
            )

    async def chat_completions(request: Request) -> Response:
        return await call(request, "/v1/chat/completions", with_body=True)

    async def completions(request: Request) -> Response:
        return await call(request, "/v1/completions", with_body=True)

    async def models(request: Request) -> Response:
        return await call(request, "/v1/models", with_body=False)

    return OpenAIHandlers(chat_completions, completions, models)
