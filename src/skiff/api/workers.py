"""``/v2/{endpoint_id}/job-take|job-stop|job-done|job-stream|ping``: the worker protocol.

Workers authenticate with a token scoped to their endpoint (``Authorization: <token>``, as the
runpod SDK sends ``RUNPOD_AI_API_KEY``). Every answer here is what the SDK 1.12.0 expects.
The handlers; their paths, methods and OpenAPI descriptions are declared in api/v2.py.
"""

import itertools
from collections.abc import Awaitable, Callable
from typing import NamedTuple, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from skiff.api import access, credentials
from skiff.api.body import WHOLE_BODY, read_body
from skiff.api.hot import Handler
from skiff.api.lean_http import CONNECTED
from skiff.api.needs import needs
from skiff.api.responses import json_response
from skiff.domain.endpoints import Endpoint
from skiff.domain.jobs import worker_payload
from skiff.domain.results import parse_worker_result, read_stream_chunk
from skiff.domain.streams import MAX_CHUNK_BYTES
from skiff.services.dispatch import StillConnected
from skiff.services.hub import Services
from skiff.services.lineup import accepts_lineups

T = TypeVar("T")

RESULT_LIMIT = 64 * 1024 * 1024
NO_CONTENT = 204
MAX_BATCH = 64
#: The most job ids one ping renews: more than any worker holds (the SDK names those it runs).
MAX_PING_JOBS = 4096


class Read(NamedTuple):
    """A worker's post about one of its jobs, to be read."""

    request: Request
    endpoint: Endpoint
    worker_id: str
    job_id: str
    #: Whether a job lined up on the worker (not yet started) counts as its own.
    lined_up: bool


class WorkerHandlers(NamedTuple):
    job_take: Handler
    job_take_batch: Handler
    job_stop: Handler
    job_done: Handler
    job_stream: Handler
    ping: Handler


def build(services: Services) -> WorkerHandlers:
    dispatch = services.dispatch
    #: Bodies over 1 MB: read in the user's turn, parsed in a helper process.
    large = services.large_bodies
    wait = services.settings.take_wait_seconds
    polls = services.long_polls

    async def endpoint_of(request: Request) -> Endpoint:
        endpoint_id = request.path_params["endpoint_id"]
        token = credentials.worker_token(request.headers.get("authorization"))
        await services.auth.check_worker(endpoint_id, token)
        endpoint = await services.endpoints.recent_copy(endpoint_id)
        await services.auth.check_worker_owner(endpoint.userId)
        return endpoint

    def jobs_in_progress(request: Request) -> bool | None:
        flag = request.query_params.get("job_in_progress")
        return None if flag not in ("0", "1") else flag == "1"

    def still_connected(request: Request) -> StillConnected:
        # A lean request (api/lean_http.py) knows it without an anyio cancel scope per call.
        lean: StillConnected | None = request.scope.get(CONNECTED)
        if lean is not None:
            return lean

        async def check() -> bool:
            return not await request.is_disconnected()

        return check

    @needs(access.WORKER)
    async def job_take(request: Request, worker_id: str) -> Response:
        """200 with `{id, input, ...}`, or 204 when no job came within the hold time. A runpod
        SDK 1.12+ worker (by its User-Agent) asking with `job_in_progress=0` may get a list
        instead, its job and the jobs lined up behind it, which it runs one after another: they
        show `IN_QUEUE` until it starts each (docs/workers.md, "Default workers: line-ups").
        429 at once when the worker holds 4 long-polls on this server already, or its
        endpoint owner's workers 1,024 (docs/deployment.md, "How much one user may hold")."""
        endpoint = await endpoint_of(request)
        with polls.hold(endpoint.userId, endpoint.id, worker_id):
            jobs = await dispatch.take(
                endpoint,
                worker_id,
                1,
                wait,
                still_connected(request),
                jobs_in_progress(request),
                may_line_up=accepts_lineups(request.headers.get("user-agent")),
            )
        if not jobs:
            return Response(status_code=NO_CONTENT)
        if len(jobs) > 1:
            # Jobs lined up behind the first (services/lineup.py): the SDK's list form.
            return json_response([worker_payload(j) for j in jobs])
        return json_response(worker_payload(jobs[0]))

    @needs(access.WORKER)
    async def job_take_batch(request: Request, worker_id: str) -> Response:
        """200 with a list of at most `batch_size` jobs, or 204; 429 past the long-polls a
        worker or its owner's workers may hold (as `job-take`)."""
        endpoint = await endpoint_of(request)
        try:
            room = max(1, int(request.query_params.get("batch_size", "1")))
        except ValueError:
            room = 1
        with polls.hold(endpoint.userId, endpoint.id, worker_id):
            jobs = await dispatch.take(
                endpoint,
                worker_id,
                min(MAX_BATCH, room),
                wait,
                still_connected(request),
                jobs_in_progress(request),
                room=room,
            )
        if not jobs:
            return Response(status_code=NO_CONTENT)
        return json_response([worker_payload(j) for j in jobs])

    @needs(access.WORKER)
    async def job_stop(request: Request, worker_id: str) -> Response:
        """200 `{jobsToStop: [...]}` when a held job was cancelled or timed out, else 204; 429
        past the long-polls a worker or its owner's workers may hold (as `job-take`)."""
        endpoint = await endpoint_of(request)
        with polls.hold(endpoint.userId, endpoint.id, worker_id):
            ids = await dispatch.stop_signals(endpoint, worker_id, wait, still_connected(request))
        if not ids:
            return Response(status_code=NO_CONTENT)
        return json_response({"jobsToStop": ids})

    @needs(access.WORKER)
    async def job_done(request: Request, worker_id: str, job_id: str) -> Response:
        """The body is JSON whatever its content type. `status: IN_PROGRESS` is a progress
        update; `error` fails the job; anything else completes it. A body nested too deep to
        store, or one that would take the jobs of the endpoint's owner past twice their share
        of the database (`SKIFF_JOB_MB_PER_USER`), fails the job with that reason and answers
        400 saying so (a progress update so refused is only not kept)."""
        # A job lined up on the worker counts as held: its result may come first.
        read = Read(request, await endpoint_of(request), worker_id, job_id, lined_up=True)
        return await handed_over(read, parse_worker_result, large.result, dispatch.done)

    @needs(access.WORKER)
    async def job_stream(request: Request, worker_id: str, job_id: str) -> Response:
        read = Read(request, await endpoint_of(request), worker_id, job_id, lined_up=False)
        return await handed_over(read, read_stream_chunk, large.chunk, dispatch.stream)

    async def handed_over(
        read: Read,
        parse: Callable[[bytes], T],
        parse_apart: Callable[[bytes], Awaitable[T]],
        hand_over: Callable[[Endpoint, str, str, T], Awaitable[str | None]],
    ) -> Response:
        """A result or stream chunk read (``worker_body``) and handed to the dispatcher
        (``hand_over``), answered with why it refused it, if it did; one left unread is
        answered as taken by nothing."""
        body = await worker_body(read, parse, parse_apart)
        if body is None:
            return _taken(None)
        return _taken(await hand_over(read.endpoint, read.worker_id, read.job_id, body))

    async def worker_body(
        read: Read, parse: Callable[[bytes], T], parse_apart: Callable[[bytes], Awaitable[T]]
    ) -> T | None:
        """A result's or stream chunk's body, parsed: one that may be over 1 MB is read in
        its user's turn and, if it is, parsed in the helper process (``parse_apart``). None
        for one over 1 MB of a job the worker does not hold: answered as for any such job
        (taken by nothing), unread, since nothing of it would be kept."""
        if not _may_be_large(read.request):
            return parse(await read_body(read.request, RESULT_LIMIT))
        async with large.turn(read.endpoint.userId):
            body = await read_body(read.request, RESULT_LIMIT)
            if len(body) <= MAX_CHUNK_BYTES:
                return parse(body)
            if await dispatch.runs(read.endpoint, read.worker_id, read.job_id, read.lined_up):
                return await parse_apart(body)
            return None

    @needs(access.WORKER)
    async def ping(request: Request, worker_id: str) -> Response:
        """Renews the leases of the jobs named in `job_id` (comma-separated). A worker whose
        start-up check failed says so (`status=unhealthy`, `check`, `reason`) before it exits:
        that becomes the endpoint's `lastWorkerFailure`."""
        endpoint = await endpoint_of(request)
        params = request.query_params
        if params.get("status") == "unhealthy":
            await services.fleet.unfit(
                endpoint.id,
                worker_id,
                _printable(params.get("check", "")),
                _printable(params.get("reason", "")),
            )
        job_ids = named_jobs(request.query_params.get("job_id", ""))
        await dispatch.ping(endpoint, worker_id, job_ids)
        return json_response({"ok": True})

    return WorkerHandlers(job_take, job_take_batch, job_stop, job_done, job_stream, ping)


def _may_be_large(request: Request) -> bool:
    """Whether a body may be over ``MAX_CHUNK_BYTES``: one read whole already (the lean
    path's) or declared within it is not; one of unknown length may be."""
    whole: bytes | None = request.scope.get(WHOLE_BODY)
    if whole is not None:
        return len(whole) > MAX_CHUNK_BYTES
    declared = request.headers.get("content-length")
    return declared is None or not declared.isdigit() or int(declared) > MAX_CHUNK_BYTES


def named_jobs(raw: str) -> list[str]:
    """The job ids of a ping's ``job_id`` (comma-separated), each once, at most
    ``MAX_PING_JOBS``: their renewal is a write every tenant's writes queue behind. No job id
    holds a NUL (and PostgreSQL text cannot): such a name is simply not held."""
    named = dict.fromkeys(j for j in raw.split(",") if j and "\x00" not in j)
    return list(itertools.islice(named, MAX_PING_JOBS))


def _printable(text: str, limit: int = 2000) -> str:
    """A worker's words as a failure shows them: no control characters or NULs, bounded."""
    return "".join(ch if ch.isprintable() else " " for ch in text[:limit]).strip()


def _taken(refused: str | None) -> Response:
    """The answer to a job's result or stream chunk: 400 with why the dispatcher refused it,
    else ok."""
    if refused is not None:
        return json_response({"error": refused}, 400)
    return json_response({"ok": True})
