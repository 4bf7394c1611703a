"""Jobs: the request panel (send a job, watch it finish or stream), the job history with its
filters, and each job's page (timings, input, output or error; never ``s3Config``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console.base import Console, json_answer
from skiff.console.endpoint_pages import detail_page
from skiff.console.forms import without_s3_secret
from skiff.domain.endpoints import Endpoint
from skiff.domain.jobs import FINAL_STATES, Job, JobStatus, parse_job_request, status_view
from skiff.domain.streams import chunk_view
from skiff.errors import Invalid

Handler = Callable[[Request], Awaitable[Response]]
#: The largest job body the request panel sends (the size ``/run`` takes).
BODY_LIMIT = 10 * 1024 * 1024
#: Jobs the history page shows at once.
PAGE_SIZE = 50
#: Jobs read from the store per step while filtering, and at most in all for one page.
SCAN_STEP = 200
SCAN_MAX = 5000
#: The history's time filter: its value -> (label, seconds back).
PERIODS = {
    "": ("any time", None),
    "15m": ("last 15 minutes", 15 * 60),
    "1h": ("last hour", 3600),
    "24h": ("last 24 hours", 24 * 3600),
    "7d": ("last 7 days", 7 * 24 * 3600),
}


def timings(job: Job, now: float) -> dict[str, float | None]:
    """Waiting and running times in seconds, as ``/status`` counts them (so far, if not done)."""
    view = status_view(job, now)
    execution = view.get("executionTime")
    return {
        "delay": view["delayTime"] / 1000,
        "execution": execution / 1000 if execution is not None else None,
    }


def matches(job: Job, state: str, since: float | None) -> bool:
    return (not state or job.status.value == state) and (since is None or job.submitted_at >= since)


async def history(
    console: Console, endpoint: Endpoint, state: str, since: float | None, before: int | None
) -> tuple[list[Job], int | None, int]:
    """Up to ``PAGE_SIZE`` jobs matching the filters, newest first, read a step at a time
    (at most ``SCAN_MAX`` jobs looked at); the cursor of the next page, and how many were
    looked at. Jobs are listed newest first, so a time filter stops at the first older job."""
    found: list[Job] = []
    scanned = 0
    cursor = before
    while scanned < SCAN_MAX and len(found) < PAGE_SIZE:
        page, cursor = await console.services.jobs.recent(endpoint, SCAN_STEP, cursor)
        for job in page:
            scanned += 1
            if since is not None and job.submitted_at < since:
                return found, None, scanned
            if matches(job, state, since):
                found.append(job)
                if len(found) == PAGE_SIZE:
                    return found, job.seq, scanned
        if cursor is None:
            break
    return found, cursor, scanned


def watch_view(job: Job, chunks: list[dict[str, Any]], now: float) -> dict[str, Any]:
    view = status_view(job, now)
    view["final"] = job.status in FINAL_STATES
    view["stream"] = chunks
    return view


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def submit(request: Request) -> Response:
        """The request panel: the form's ``body`` is a ``/run`` body. Its script asks for
        JSON and then watches the job; without script the browser goes to the job's page."""
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        form = await console.form(request, visitor)
        body = form.get("body", "")
        wants_json = "application/json" in request.headers.get("accept", "")
        try:
            if len(body.encode()) > BODY_LIMIT:
                raise Invalid("the job body is over 10 MB", field="body")
            job_request = parse_job_request(body.encode(), endpoint.spec.executionTimeoutMs)
            job = await services.jobs.submit(endpoint, job_request, sync=False)
        except Invalid as exc:
            if wants_json:
                return json_answer({"error": exc.message, "field": exc.field}, 400)
            # The form comes back to fix, but never with the secret it was given.
            shown = without_s3_secret(body)
            return await detail_page(
                console, request, visitor, endpoint, shown, exc.message, status=400
            )
        if wants_json:
            return json_answer({"id": job.id, "status": job.status.value})
        return Console.redirect(request, f"/endpoints/{endpoint.id}/jobs/{job.id}")

    async def watch(request: Request) -> Response:
        """The job's state with the stream chunks after ``?after=`` (the ``next`` of the last
        answer; the request panel polls it). Only read: ``/stream``'s cursor is the API
        client's, so the page takes no chunk from it."""
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        after = request.query_params.get("after", "0")
        if not after.isdigit() or len(after) > 18:
            raise Invalid("after must be a whole number (the last answer's next)", field="after")
        read = await services.jobs.peek_stream(endpoint, request.path_params["job_id"], int(after))
        chunks = [chunk_view(c) for c in read.chunks]
        view = watch_view(read.job, chunks, services.clock.now())
        view["next"] = read.chunks[-1].seq if read.chunks else int(after)
        return Response(
            orjson.dumps(view),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def job_history(request: Request) -> Response:
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        state = request.query_params.get("state", "")
        if state not in {s.value for s in JobStatus}:
            state = ""
        period = request.query_params.get("period", "")
        if period not in PERIODS:
            period = ""
        seconds = PERIODS[period][1]
        since = services.clock.now() - seconds if seconds is not None else None
        raw_before = request.query_params.get("before", "")
        before = int(raw_before) if raw_before.isdigit() else None
        jobs, next_cursor, scanned = await history(console, endpoint, state, since, before)
        return console.page(
            request,
            "jobs.html",
            visitor,
            title=f"Jobs of {endpoint.spec.name}",
            endpoint=endpoint,
            jobs=jobs,
            state=state,
            period=period,
            periods=PERIODS,
            states=[s.value for s in JobStatus],
            next_cursor=next_cursor,
            scanned=scanned,
            scan_max=SCAN_MAX,
            paged=before is not None,
        )

    async def job_state(request: Request, template: str) -> Response:
        visitor = await console.signed_in(request)
        endpoint = await console.endpoint(visitor, request)
        job = await services.jobs.get(endpoint, request.path_params["job_id"])
        return console.page(
            request,
            template,
            visitor,
            title=f"Job {job.id}",
            endpoint=endpoint,
            job=job,
            times=timings(job, services.clock.now()),
            final=job.status in FINAL_STATES,
            retryable=job.status in (JobStatus.FAILED, JobStatus.TIMED_OUT),
        )

    async def job_page(request: Request) -> Response:
        return await job_state(request, "job.html")

    async def job_live(request: Request) -> Response:
        return await job_state(request, "_job_live.html")

    def job_action(act: Callable[[Endpoint, str], Awaitable[Job]]) -> Handler:
        """Cancel or retry, then back to the job's page."""

        async def handler(request: Request) -> Response:
            visitor = await console.signed_in(request)
            endpoint = await console.endpoint(visitor, request)
            await console.form(request, visitor)
            job = await act(endpoint, request.path_params["job_id"])
            return Console.redirect(request, f"/endpoints/{endpoint.id}/jobs/{job.id}")

        return handler

    return [
        Route("/endpoints/{endpoint_id}/jobs", job_history, methods=["GET"]),
        Route("/endpoints/{endpoint_id}/jobs", submit, methods=["POST"]),
        Route("/endpoints/{endpoint_id}/jobs/{job_id}", job_page, methods=["GET"]),
        Route("/endpoints/{endpoint_id}/jobs/{job_id}/live", job_live, methods=["GET"]),
        Route("/endpoints/{endpoint_id}/jobs/{job_id}/watch.json", watch, methods=["GET"]),
        Route(
            "/endpoints/{endpoint_id}/jobs/{job_id}/cancel",
            job_action(services.jobs.cancel),
            methods=["POST"],
        ),
        Route(
            "/endpoints/{endpoint_id}/jobs/{job_id}/retry",
            job_action(services.jobs.retry),
            methods=["POST"],
        ),
    ]
