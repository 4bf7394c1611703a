"""The job: its states, the one function that checks every move, and the request it is made from."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from skiff.domain import json_limits
from skiff.domain.times import iso
from skiff.domain.workers import worker_name
from skiff.errors import Invalid


class JobStatus(enum.StrEnum):
    #: Accepted and waiting for a worker.
    IN_QUEUE = "IN_QUEUE"
    #: Held by a worker that is running the handler.
    IN_PROGRESS = "IN_PROGRESS"
    #: The handler returned; ``output`` holds its result.
    COMPLETED = "COMPLETED"
    #: The handler reported an error, or the worker was lost too many times.
    FAILED = "FAILED"
    #: Cancelled by the client before it finished.
    CANCELLED = "CANCELLED"
    #: Ran longer than its ``executionTimeout``.
    TIMED_OUT = "TIMED_OUT"


FINAL_STATES = frozenset(
    {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT}
)

#: Every legal move. IN_PROGRESS -> IN_QUEUE is a lost worker's job going back to the queue;
#: FAILED/TIMED_OUT -> IN_QUEUE is ``/retry``.
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.IN_QUEUE: frozenset({JobStatus.IN_PROGRESS, JobStatus.CANCELLED}),
    JobStatus.IN_PROGRESS: frozenset(
        {
            JobStatus.COMPLETED,
            JobStatus.FAILED,
            JobStatus.TIMED_OUT,
            JobStatus.CANCELLED,
            JobStatus.IN_QUEUE,
        }
    ),
    JobStatus.FAILED: frozenset({JobStatus.IN_QUEUE}),
    JobStatus.TIMED_OUT: frozenset({JobStatus.IN_QUEUE}),
    JobStatus.COMPLETED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


def sources_of(target: JobStatus) -> frozenset[JobStatus]:
    """The states a job may be in to move to ``target``: the guard of a conditional update."""
    return frozenset(src for src, dsts in TRANSITIONS.items() if target in dsts)


# Policy limits (milliseconds), from the specification's limits table.
EXECUTION_TIMEOUT_MIN_MS = 5_000
TTL_DEFAULT_MS = 86_400_000
TTL_MIN_MS = 10_000
SEVEN_DAYS_MS = 7 * 24 * 3600 * 1000


#: How long a finished job's result stays readable.
ASYNC_RETENTION_MS = 30 * 60 * 1000
SYNC_RETENTION_MS = 60 * 1000
SYNC_RETENTION_MAX_MS = 5 * 60 * 1000
#: ``GET /status/{id}?ttl=`` may shorten a job's life below the policy minimum (the
#: specification's own example is 6000 ms); it may not make it longer than 7 days.
STATUS_TTL_MIN_MS = 1


def retention_ms(sync: bool, wait_ms: int | None) -> int:
    """30 minutes for ``/run``; for ``/runsync`` 1 minute, or as long as the ``wait`` the
    client was ready to spend, up to 5 minutes."""
    if not sync:
        return ASYNC_RETENTION_MS
    if wait_ms is None:
        return SYNC_RETENTION_MS
    return max(SYNC_RETENTION_MS, min(SYNC_RETENTION_MAX_MS, wait_ms))


def parse_status_ttl(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise Invalid("ttl must be an integer number of milliseconds", field="ttl") from None
    if not STATUS_TTL_MIN_MS <= value <= SEVEN_DAYS_MS:
        raise Invalid(
            f"ttl must be between {STATUS_TTL_MIN_MS} and {SEVEN_DAYS_MS} milliseconds",
            field="ttl",
        )
    return value


@dataclass(frozen=True, slots=True)
class Policy:
    execution_timeout_ms: int
    ttl_ms: int
    low_priority: bool


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A validated ``/run`` or ``/runsync`` body, with JSON parts kept as text for the store."""

    input_json: str
    policy: Policy
    webhook: str | None
    s3_config_json: str | None


@dataclass(frozen=True, slots=True)
class JobCounts:
    """How many of an endpoint's jobs are in each state."""

    in_queue: int = 0
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    timed_out: int = 0
    retried: int = 0
    #: Normal-priority jobs waiting: the ones that may raise the worker count.
    in_queue_normal: int = 0
    #: When the oldest normal-priority job waiting was submitted (None when none waits).
    oldest_queued_at: float | None = None


@dataclass(slots=True)
class Job:
    id: str
    endpoint_id: str
    status: JobStatus
    input_json: str
    execution_timeout_ms: int
    ttl_ms: int
    low_priority: bool
    webhook: str | None
    #: Encrypted at rest (store/sealing.py): in clear in a job the store's ``get_job`` or a
    #: claim read; as stored (sealed) in any other read, where nothing may show it anyway.
    s3_config_json: str | None
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    output_json: str | None = None
    error: str | None = None
    worker_id: str | None = None
    attempt: int = 0
    retries: int = 0
    lease_until: float | None = None
    #: ``submitted_at + ttl``: past it the job is gone, whatever its state.
    expires_at: float = float("inf")
    #: How long a final result stays readable (30 min for /run, 1-5 min for /runsync).
    retention_ms: int = 1_800_000
    #: ``finished_at + retention``, once the job is final.
    retain_until: float | None = None
    #: ``started_at + executionTimeout`` while a worker runs it.
    run_deadline: float | None = None
    #: Submission order (a cursor for listings).
    seq: int = 0
    #: Not stored: set on the job a cancel returns when its worker must be told to stop.
    stop_pending: bool = False
    #: Not stored: set on the job a result finishes when the next job lined up on its worker is
    #: no longer wanted: the worker starts that job on its own unless it is ended first.
    line_broken: bool = False
    #: Who submitted it through a public model's id, when not the endpoint's owner: only that
    #: caller reads or acts on it (``services/jobs.py``). None: the owner's own.
    caller_id: str | None = None

    def readable_at(self, now: float) -> bool:
        """False once its ttl or its retention window has passed: it answers 404 from then on,
        even before the reaper deletes the row."""
        if now >= self.expires_at:
            return False
        return self.retain_until is None or now < self.retain_until


def _int_in_range(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{field} must be an integer number of milliseconds", field=field)
    if not low <= value <= high:
        raise Invalid(f"{field} must be between {low} and {high} milliseconds", field=field)
    return value


def parse_policy(raw: Any, default_execution_timeout_ms: int) -> Policy:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise Invalid("policy must be an object", field="policy")
    unknown = set(raw) - {"executionTimeout", "ttl", "lowPriority"}
    if unknown:
        raise Invalid(f"policy has unknown field(s): {', '.join(sorted(unknown))}", field="policy")
    execution = raw.get("executionTimeout")
    ttl = raw.get("ttl")
    low = raw.get("lowPriority", False)
    if not isinstance(low, bool):
        raise Invalid("policy.lowPriority must be a boolean", field="policy.lowPriority")
    return Policy(
        execution_timeout_ms=(
            default_execution_timeout_ms
            if execution is None
            else _int_in_range(
                execution,
                "policy.executionTimeout",
                EXECUTION_TIMEOUT_MIN_MS,
                SEVEN_DAYS_MS,
            )
        ),
        ttl_ms=(
            TTL_DEFAULT_MS
            if ttl is None
            else _int_in_range(ttl, "policy.ttl", TTL_MIN_MS, SEVEN_DAYS_MS)
        ),
        low_priority=low,
    )


def _parse_webhook(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise Invalid("webhook must be a URL string", field="webhook")
    if len(raw) > WEBHOOK_MAX_LENGTH:
        raise Invalid(f"webhook must be at most {WEBHOOK_MAX_LENGTH} characters", field="webhook")
    if any(c <= " " or c == "\x7f" for c in raw):
        # A URL holds no spaces or control characters, and PostgreSQL text cannot hold NUL.
        raise Invalid("webhook must not contain spaces or control characters", field="webhook")
    try:
        parts = urlsplit(raw)
        _ = parts.port  # raises on a port that is not a number in range
    except ValueError:
        raise Invalid("webhook must be an absolute http(s) URL", field="webhook") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid("webhook must be an absolute http(s) URL", field="webhook")
    return raw


#: Browsers and proxies handle URLs up to about this long.
WEBHOOK_MAX_LENGTH = 2048

S3_FIELDS = ("accessId", "accessSecret", "bucketName", "endpointUrl")

#: The fields of a job request (the specification's table; what the runpod SDK passes on).
REQUEST_FIELDS = frozenset({"input", "webhook", "policy", "s3Config"})


def _parse_s3_config(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise Invalid("s3Config must be an object", field="s3Config")
    for key, value in raw.items():
        if key not in S3_FIELDS:
            raise Invalid(f"s3Config has an unknown field: {key}", field=f"s3Config.{key}")
        if not isinstance(value, str):
            raise Invalid(f"s3Config.{key} must be a string", field=f"s3Config.{key}")
    return orjson.dumps(raw).decode()


def parse_job_request(body: bytes, default_execution_timeout_ms: int) -> JobRequest:
    """Validate a submission body. Everything wrong with it is a 400 that names the field."""
    try:
        doc, too_deep = json_limits.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Invalid(f"the body is not valid JSON: {exc}", field="body") from None
    if too_deep:
        raise Invalid(f"the body is {json_limits.TOO_DEEP}", field="body")
    if not isinstance(doc, dict):
        raise Invalid("the body must be a JSON object with an 'input' field", field="body")
    if not REQUEST_FIELDS.issuperset(doc):
        # A typo (``webhok``) would otherwise lose what the caller meant without a word.
        unknown = sorted(set(doc) - REQUEST_FIELDS)
        raise Invalid(
            f"unknown field(s): {', '.join(unknown)} (a job request has "
            "input, webhook, policy and s3Config)",
            field=unknown[0],
        )
    if "input" not in doc:
        raise Invalid("input is required", field="input")
    job_input = doc["input"]
    if not isinstance(job_input, dict):
        raise Invalid("input must be a JSON object", field="input")
    return JobRequest(
        input_json=orjson.dumps(job_input).decode(),
        policy=parse_policy(doc.get("policy"), default_execution_timeout_ms),
        webhook=_parse_webhook(doc.get("webhook")),
        s3_config_json=_parse_s3_config(doc.get("s3Config")),
    )


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def status_view(job: Job, now: float) -> dict[str, Any]:
    """The ``/status`` body: never carries ``s3Config``."""
    view: dict[str, Any] = {"id": job.id, "status": job.status.value}
    if job.started_at is not None:
        view["delayTime"] = _ms(job.started_at - job.submitted_at)
        end = job.finished_at if job.finished_at is not None else now
        view["executionTime"] = _ms(max(0.0, end - job.started_at))
    else:
        view["delayTime"] = _ms(max(0.0, (job.finished_at or now) - job.submitted_at))
    if job.output_json is not None:
        view["output"] = orjson.Fragment(job.output_json)
    if job.error is not None:
        view["error"] = job.error
    # A job lined up on a worker (services/lineup.py) names it only once it started there.
    if job.worker_id is not None and job.started_at is not None:
        view["workerId"] = worker_name(job.worker_id)
    if job.retries:
        view["retries"] = job.retries
    return view


def _iso(ts: float | None) -> str | None:
    # /v2's own wire format, which happens to be the one /v1 prints too.
    return iso(ts) if ts is not None else None


def request_view(job: Job) -> dict[str, Any]:
    """A job as ``/requests`` lists it: identity, state and times, no input or output."""
    return {
        "id": job.id,
        "status": job.status.value,
        "submittedAt": _iso(job.submitted_at),
        "startedAt": _iso(job.started_at),
        "finishedAt": _iso(job.finished_at),
        "retries": job.retries,
    }


def worker_payload(job: Job) -> dict[str, Any]:
    """What job-take hands the handler: id and input, plus webhook, policy and s3Config."""
    payload: dict[str, Any] = {"id": job.id, "input": orjson.Fragment(job.input_json)}
    if job.webhook is not None:
        payload["webhook"] = job.webhook
    payload["policy"] = {
        "executionTimeout": job.execution_timeout_ms,
        "ttl": job.ttl_ms,
        "lowPriority": job.low_priority,
    }
    if job.s3_config_json is not None:
        payload["s3Config"] = orjson.Fragment(job.s3_config_json)
    return payload
