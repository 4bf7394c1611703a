"""``/v2/{endpoint_id}/...``: the job interface clients call (the runpod SDK's ``Endpoint``).

The handlers; their paths, methods and OpenAPI descriptions are declared in api/v2.py."""

from contextlib import AbstractAsyncContextManager
from typing import Any, NamedTuple

from starlette.requests import Request
from starlette.responses import Response

from skiff.api import access
from skiff.api.body import read_body
from skiff.api.hot import Handler
from skiff.api.needs import needs
from skiff.api.params import query
from skiff.api.responses import json_response
from skiff.domain.endpoints import Endpoint
from skiff.domain.health import health_view
from skiff.domain.jobs import (
    FINAL_STATES,
    Job,
    JobStatus,
    parse_job_request,
    parse_status_ttl,
    request_view,
    status_view,
)
from skiff.domain.permissions import Need
from skiff.domain.placement import placement_view
from skiff.domain.streams import chunk_view
from skiff.errors import Invalid
from skiff.services.hub import Services

RUN_LIMIT = 10 * 1024 * 1024
RUNSYNC_LIMIT = 20 * 1024 * 1024
WAIT_DEFAULT_MS = 90_000
WAIT_MIN_MS = 1_000
WAIT_MAX_MS = 300_000


def _wait_ms(request: Request) -> int:
    raw = query(request, "wait")
    if raw is None:
        return WAIT_DEFAULT_MS
    try:
        value = int(raw)
    except ValueError:
        raise Invalid("wait must be an integer number of milliseconds", field="wait") from None
    if not WAIT_MIN_MS <= value <= WAIT_MAX_MS:
        raise Invalid(f"wait must be between {WAIT_MIN_MS} and {WAIT_MAX_MS}", field="wait")
    return value


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = query(request, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Invalid(f"{name} must be an integer", field=name) from None
    if not low <= value <= high:
        raise Invalid(f"{name} must be between {low} and {high}", field=name)
    return value


class JobHandlers(NamedTuple):
    run: Handler
    runsync: Handler
    status: Handler
    requests: Handler
    stream: Handler
    cancel: Handler
    retry: Handler
    purge_queue: Handler
    health: Handler


def build(services: Services) -> JobHandlers:
    jobs = services.jobs
    clock = services.clock

    def admitted(
        request: Request, operation: str, need: Need | None = None
    ) -> AbstractAsyncContextManager[Endpoint]:
        return access.admitted(services, request, operation, need)

    async def _why_queued(endpoint: Endpoint, job: Job, view: dict[str, Any]) -> dict[str, Any]:
        # A job waiting on an endpoint whose workers are held back (no GPU that fits, failing
        # starts, the worker limit) says why where its client looks, not only in /health.
        if job.status is JobStatus.IN_QUEUE:
            blocker = await jobs.blocker(endpoint)
            if blocker is not None:
                view["placement"] = placement_view(blocker)
        return view

    @needs(access.NEEDS["run"])
    async def run(request: Request) -> Response:
        """Queue a job; answers `{id, status: "IN_QUEUE"}`. Bodies over 10 MB answer 413."""
        async with admitted(request, "run") as endpoint:
            body = await read_body(request, RUN_LIMIT)
            job_request = parse_job_request(body, endpoint.spec.executionTimeoutMs)
            job = await jobs.submit(endpoint, job_request, sync=False)
            return json_response({"id": job.id, "status": job.status.value})

    @needs(access.NEEDS["runsync"])
    async def runsync(request: Request) -> Response:
        """Queue a job and wait up to `wait` ms (1000..300000, default 90000) for it to finish.
        A finished job answers its full status; otherwise `{id, status}` and the job goes on."""
        async with admitted(request, "runsync") as endpoint:
            wait_ms = _wait_ms(request)
            given = wait_ms if query(request, "wait") is not None else None
            body = await read_body(request, RUNSYNC_LIMIT)
            job_request = parse_job_request(body, endpoint.spec.executionTimeoutMs)
            job = await jobs.submit(endpoint, job_request, sync=True, wait_ms=given)
            job = await jobs.wait_until_final(endpoint, job.id, wait_ms / 1000, submitted=job)
            if job.status in FINAL_STATES:
                return json_response(status_view(job, clock.now()))
            return json_response(
                await _why_queued(endpoint, job, {"id": job.id, "status": job.status.value})
            )

    @needs(access.NEEDS["status"])
    async def status(request: Request, job_id: str) -> Response:
        """`?ttl=ms` sets this job's time to live, counted from its submission (1 ms to 7 days);
        it changes the job, so it needs a key with `read_write` on the endpoint, as a cancel
        does. A job past its ttl or its retention window answers 404."""
        raw_ttl = query(request, "ttl")
        async with admitted(
            request, "status", None if raw_ttl is None else access.SET_TTL
        ) as endpoint:
            if raw_ttl is not None:
                job = await jobs.set_ttl(endpoint, job_id, parse_status_ttl(raw_ttl))
            else:
                job = await jobs.get(endpoint, job_id)
            return json_response(await _why_queued(endpoint, job, status_view(job, clock.now())))

    @needs(access.NEEDS["requests"])
    async def requests(request: Request) -> Response:
        """Newest first, `limit` (1-200, default 50) a page; pass `nextCursor` back as
        `cursor` for the next page. No input or output: `/status` has those."""
        async with admitted(request, "requests") as endpoint:
            limit = _int_param(request, "limit", 50, 1, 200)
            cursor = query(request, "cursor")
            before = _int_param(request, "cursor", 0, 1, 2**62) if cursor is not None else None
            page, next_cursor = await jobs.recent(endpoint, limit, before)
            return json_response(
                {
                    "requests": [request_view(j) for j in page],
                    "nextCursor": str(next_cursor) if next_cursor is not None else None,
                }
            )

    @needs(access.NEEDS["stream"])
    async def stream(request: Request, job_id: str) -> Response:
        """Only the chunks not returned before, in order: `{id, status, stream: [{output}]}`."""
        async with admitted(request, "stream") as endpoint:
            read = await jobs.read_stream(endpoint, job_id)
            body: dict[str, Any] = {
                "id": read.job.id,
                "status": read.job.status.value,
                "stream": [chunk_view(c) for c in read.chunks],
            }
            if read.job.error is not None and read.job.status in FINAL_STATES:
                body["error"] = read.job.error
            return json_response(body)

    @needs(access.NEEDS["cancel"])
    async def cancel(request: Request, job_id: str) -> Response:
        """Answers at once. A job that already finished keeps (and answers) its final state."""
        async with admitted(request, "cancel") as endpoint:
            job = await jobs.cancel(endpoint, job_id)
            return json_response({"id": job.id, "status": job.status.value})

    @needs(access.NEEDS["retry"])
    async def retry(request: Request, job_id: str) -> Response:
        async with admitted(request, "retry") as endpoint:
            job = await jobs.retry(endpoint, job_id)
            return json_response({"id": job.id, "status": job.status.value})

    @needs(access.NEEDS["purge-queue"])
    async def purge_queue(request: Request) -> Response:
        async with admitted(request, "purge-queue") as endpoint:
            removed = await jobs.purge_queue(endpoint)
            return json_response({"removed": removed, "status": "completed"})

    @needs(access.NEEDS["health"])
    async def health(request: Request) -> Response:
        async with admitted(request, "health") as endpoint:
            return json_response(health_view(await jobs.health(endpoint)))

    return JobHandlers(run, runsync, status, requests, stream, cancel, retry, purge_queue, health)
