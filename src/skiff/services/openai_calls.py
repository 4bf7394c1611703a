"""OpenAI-compatible calls, each wrapped as a job: how long a call waits for its answer, what
becomes of a job whose caller left, and what a failed or late job answers.

The job's input is ``{"openai_route": "/v1/chat/completions", "openai_input": <body>}`` (no
``openai_input`` for a GET), which is what OpenAI-compatible workers (vLLM and the like)
expect.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from skiff.domain.endpoints import Endpoint
from skiff.domain.jobs import FINAL_STATES, Job, JobStatus, parse_job_request
from skiff.services.jobs import Jobs

#: How long a non-streaming call waits for its job, like the longest ``/runsync`` wait.
WAIT_SECONDS = 300.0
#: The job's retention, as a ``/runsync`` that waited that long keeps it.
_WAIT_MS = 300_000


class Ending(enum.Enum):
    #: The job completed: its output is the answer.
    ANSWERED = "answered"
    #: The job ended otherwise (failed, cancelled, timed out): ``error`` says how.
    FAILED = "failed"
    #: No answer within ``WAIT_SECONDS``: the job goes on.
    NO_ANSWER = "no-answer"
    #: The caller went away first: the job was cancelled, nobody is left to answer.
    LEFT = "left"


@dataclass(frozen=True, slots=True)
class CallOutcome:
    ending: Ending
    job: Job
    #: What to tell the caller for FAILED and NO_ANSWER.
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One chunk the worker yielded (``output_json``), or the job's end when it did not
    complete (``error``)."""

    output_json: str | None = None
    error: str | None = None


class OpenAICalls:
    def __init__(self, jobs: Jobs) -> None:
        self._jobs = jobs
        #: Cancels of streams whose callers left, running on past the stream's own task.
        self._cancelling: set[asyncio.Task[Job]] = set()

    async def start(self, endpoint: Endpoint, route: str, body: dict[str, Any] | None) -> Job:
        """Queue the call as a job; ``body`` is the request's JSON object (None for a GET)."""
        job_input: dict[str, Any] = {"openai_route": route}
        if body is not None:
            job_input["openai_input"] = body
        # Read back as any job request is, so the nesting limit counts the wrapping too.
        request = parse_job_request(
            orjson.dumps({"input": job_input}), endpoint.spec.executionTimeoutMs
        )
        return await self._jobs.submit(endpoint, request, sync=True, wait_ms=_WAIT_MS)

    async def outcome(
        self, endpoint: Endpoint, job: Job, gone: Callable[[], Awaitable[None]]
    ) -> CallOutcome:
        """The job once final (or as it is after ``WAIT_SECONDS``), unless ``gone`` returns
        first: the answer is then no longer wanted, and the job is cancelled (freeing the
        worker) at once instead of after the whole wait."""
        waiting = asyncio.ensure_future(self._jobs.wait_until_final(endpoint, job.id, WAIT_SECONDS))
        leaving = asyncio.ensure_future(gone())
        try:
            await asyncio.wait((waiting, leaving), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            leaving.cancel()
        if not waiting.done() or waiting.cancelled():
            await self._jobs.cancel(endpoint, job.id)
            return CallOutcome(Ending.LEFT, job)
        final = waiting.result()
        if final.status is JobStatus.COMPLETED:
            return CallOutcome(Ending.ANSWERED, final)
        if final.status in FINAL_STATES:
            return CallOutcome(
                Ending.FAILED, final, final.error or f"the job ended {final.status.value}"
            )
        return CallOutcome(
            Ending.NO_ANSWER, final, "no answer from a worker within 300 s; the job goes on"
        )

    async def events(self, endpoint: Endpoint, job_id: str) -> AsyncGenerator[StreamEvent]:
        """The chunks as the worker yields them, then the error if the job did not complete.
        A caller that stops reading before the end no longer wants the answer: the job is
        cancelled, freeing the worker."""
        finished = False
        try:
            async for read in self._jobs.follow_stream(endpoint, job_id):
                for chunk in read.chunks:
                    yield StreamEvent(output_json=chunk.output_json)
                if read.job.status in FINAL_STATES and not read.chunks:
                    finished = True
                    if read.job.status is not JobStatus.COMPLETED:
                        yield StreamEvent(error=read.job.error or read.job.status.value)
        finally:
            if not finished:
                await self._cancel_unwanted(endpoint, job_id)

    async def _cancel_unwanted(self, endpoint: Endpoint, job_id: str) -> None:
        """Cancel a streamed job nobody reads any more, as ``/cancel`` does. A caller that
        leaves cancels the task relaying its stream (Starlette ends the response's task group),
        and an await in that task is cancelled in turn: the store would record the cancel but
        the job's worker would never be told (its job-stop poll is woken after the write). So
        the cancel runs in a task of its own, which the leaving does not reach."""
        task = asyncio.ensure_future(self._jobs.cancel(endpoint, job_id))
        self._cancelling.add(task)
        task.add_done_callback(self._cancelling.discard)
        await asyncio.shield(task)
