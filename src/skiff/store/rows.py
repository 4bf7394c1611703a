"""Pure helpers shared by the store adapters: column lists, row -> domain object, SQL bits."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus, status_view
from skiff.domain.templates import Template
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.store.base import ApiKey, JobCounts, RegistryAuthRecord, User

JOB_COLUMNS = (
    "id, endpoint_id, status, input, execution_timeout_ms, ttl_ms, low_priority, webhook, "
    "s3_config, submitted_at, started_at, finished_at, output, error, worker_id, attempt, "
    "retries, lease_until, expires_at, retention_ms, retain_until, run_deadline, seq"
)


def job_from_row(row: Any) -> Job:
    return Job(
        id=row[0],
        endpoint_id=row[1],
        status=JobStatus(row[2]),
        input_json=row[3],
        execution_timeout_ms=row[4],
        ttl_ms=row[5],
        low_priority=bool(row[6]),
        webhook=row[7],
        s3_config_json=row[8],
        submitted_at=row[9],
        started_at=row[10],
        finished_at=row[11],
        output_json=row[12],
        error=row[13],
        worker_id=row[14],
        attempt=row[15],
        retries=row[16],
        lease_until=row[17],
        expires_at=row[18] if row[18] is not None else float("inf"),
        retention_ms=row[19],
        retain_until=row[20],
        run_deadline=row[21],
        seq=row[22],
    )


def endpoint_from_row(row: Any) -> Endpoint:
    return Endpoint(
        id=row[0],
        userId=row[1],
        spec=EndpointSpec.model_validate_json(row[2]),
        version=row[3],
        createdAt=row[4],
    )


WORKER_COLUMNS = (
    "id, endpoint_id, kind, state, version, started_at, last_seen, idle_since, pid, gpu, recycle,"
    " gpu_ids, owner"
)

#: Columns ``update_worker`` may set, and how a value is written (enums as their value).
WORKER_FIELDS = frozenset(
    {
        "state",
        "version",
        "started_at",
        "last_seen",
        "idle_since",
        "pid",
        "gpu",
        "gpu_ids",
        "recycle",
        "owner",
    }
)


def worker_params(worker: Worker) -> tuple[Any, ...]:
    """A worker's values in ``WORKER_COLUMNS`` order (both drivers take the bool as is)."""
    return (
        worker.id,
        worker.endpoint_id,
        worker.kind.value,
        worker.state.value,
        worker.version,
        worker.started_at,
        worker.last_seen,
        worker.idle_since,
        worker.pid,
        worker.gpu,
        worker.recycle,
        worker.gpu_ids,
        worker.owner,
    )


def worker_from_row(row: Any) -> Worker:
    return Worker(
        id=row[0],
        endpoint_id=row[1],
        kind=WorkerKind(row[2]),
        state=WorkerState(row[3]),
        version=row[4],
        started_at=row[5],
        last_seen=row[6],
        idle_since=row[7],
        pid=row[8],
        gpu=row[9],
        recycle=bool(row[10]),
        gpu_ids=row[11],
        owner=row[12],
    )


def sql_in(states: Iterable[JobStatus]) -> str:
    """A SQL ``IN`` list of job states (constants only, never user input)."""
    return "(" + ",".join(f"'{s.value}'" for s in sorted(states)) + ")"


def webhook_payload(job: Job, finished_at: float) -> str:
    """The JSON body of a job's webhook: its ``/status`` body plus ``input`` and ``webhook``."""
    payload = status_view(job, finished_at)
    payload["input"] = orjson.Fragment(job.input_json)
    payload["webhook"] = job.webhook
    return orjson.dumps(payload).decode()


#: The grouped count both adapters run (placeholder style aside) for ``job_counts``.
#: Folded counts plus the deltas not folded yet (``job_counts`` and ``job_count_deltas``, kept
#: by triggers on ``jobs``): a few rows per endpoint whatever its number of jobs. ``{p}`` is
#: the adapter's placeholder for the endpoint id, used twice.
JOB_COUNTS_SQL = (
    "SELECT status, low_priority, SUM(n), SUM(retries) FROM ("
    " SELECT status, low_priority, n, retries FROM job_counts WHERE endpoint_id = {p}"
    " UNION ALL"
    " SELECT status, low_priority, n, retries FROM job_count_deltas WHERE endpoint_id = {p}"
    ") AS c GROUP BY status, low_priority"
)

#: Fold the deltas up to ``{max}`` (a placeholder) into ``job_counts``; the same statement text
#: works on both backends.
FOLD_JOB_COUNTS_SQL = (
    "INSERT INTO job_counts (endpoint_id, status, low_priority, n, retries)"
    " SELECT endpoint_id, status, low_priority, SUM(n), SUM(retries) FROM job_count_deltas"
    " WHERE id <= {max} GROUP BY endpoint_id, status, low_priority"
    " ON CONFLICT (endpoint_id, status, low_priority) DO UPDATE"
    " SET n = job_counts.n + excluded.n, retries = job_counts.retries + excluded.retries"
)


def job_counts_from(rows: Iterable[Any]) -> JobCounts:
    """``JobCounts`` from rows of ``(status, low_priority, count, sum of retries)``; the
    adapter adds ``oldest_queued_at`` with a second query, only when a normal job waits."""
    by_status: dict[str, int] = {}
    normal_queued = 0
    retried = 0
    for status, low, count, retries in rows:
        count = int(count or 0)
        by_status[status] = by_status.get(status, 0) + count
        retried += int(retries or 0)
        if status == "IN_QUEUE" and not low:
            normal_queued = count
    return JobCounts(
        in_queue=by_status.get("IN_QUEUE", 0),
        in_progress=by_status.get("IN_PROGRESS", 0),
        completed=by_status.get("COMPLETED", 0),
        failed=by_status.get("FAILED", 0),
        cancelled=by_status.get("CANCELLED", 0),
        timed_out=by_status.get("TIMED_OUT", 0),
        retried=retried,
        in_queue_normal=normal_queued,
    )


def user_from_row(row: Any) -> User:
    return User(row["id"], row["name"], bool(row["is_admin"]), row["created_at"])


def api_key_from_row(row: Any) -> tuple[ApiKey, User]:
    """A key and its owner, from a row of the ``find_api_key`` / ``list_api_keys`` queries."""
    return (
        ApiKey(
            row["key_id"],
            row["user_id"],
            row["hint"],
            row["label"],
            row["key_created_at"],
            row["revoked_at"],
        ),
        User(row["user_id"], row["user_name"], bool(row["is_admin"]), row["user_created_at"]),
    )


def registry_auth_from_row(row: Any) -> RegistryAuthRecord:
    return RegistryAuthRecord(
        row["id"], row["user_id"], row["name"], row["username"], row["password"], row["created_at"]
    )


# Named parameters of the account and template writes, one mapping for both adapters' queries
# (store/queries/*.sql).
def user_params(user: User) -> dict[str, Any]:
    return {
        "id": user.id,
        "name": user.name,
        "is_admin": user.is_admin,
        "created_at": user.created_at,
    }


def api_key_params(key: ApiKey, key_hash: str) -> dict[str, Any]:
    return {
        "id": key.id,
        "user_id": key.user_id,
        "key_hash": key_hash,
        "hint": key.hint,
        "label": key.label,
        "created_at": key.created_at,
    }


def registry_auth_params(auth: RegistryAuthRecord) -> dict[str, Any]:
    return {
        "id": auth.id,
        "user_id": auth.user_id,
        "name": auth.name,
        "username": auth.username,
        "password": auth.password,
        "created_at": auth.created_at,
    }


def template_params(user_id: str, template: Template) -> dict[str, Any]:
    """``create_template`` adds ``created_at``."""
    return {
        "id": template.id,
        "user_id": user_id,
        "name": template.name,
        "spec": template.model_dump_json(),
    }
