"""Pure helpers shared by the store adapters: a row (read by column name) -> domain object,
and a domain object -> the named parameters of a query in ``store/queries``."""

from __future__ import annotations

import enum
import inspect
import operator
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import orjson

from skiff.domain import permissions
from skiff.domain.billing import Usage, UsageKind
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus, sources_of, status_view
from skiff.domain.pods import DesiredStatus, Pod, PodPlacement, PodSpec
from skiff.domain.public_models import PublicModel
from skiff.domain.secrets import Secret
from skiff.domain.templates import Template
from skiff.domain.volumes import NetworkVolume
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.store.base import (
    ApiKey,
    JobCounts,
    RegistryAuthRecord,
    StreamChunk,
    User,
    WebhookDelivery,
)

T = TypeVar("T")


class RowReader(Generic[T]):
    """Makes a ``T`` from a row by column name: the columns are the parameter names of
    ``make``, so the one function says which column becomes what."""

    def __init__(self, make: Callable[..., T]) -> None:
        self._make = make
        self.columns = tuple(inspect.signature(make).parameters)
        self._by_name = operator.itemgetter(*self.columns)

    def __call__(self, row: Any) -> T:
        """From a row read by name (asyncpg's Record, a dict)."""
        return self._make(*self._by_name(row))

    def for_columns(self, columns: Sequence[str]) -> Callable[[Sequence[Any]], T]:
        """For rows that come as plain tuples of these columns (sqlite3): each column found by
        name once, here, instead of on every row."""
        pick = operator.itemgetter(*(columns.index(name) for name in self.columns))
        make = self._make
        return lambda row: make(*pick(row))


def _job(
    id: str,
    endpoint_id: str,
    status: str,
    input: str,
    execution_timeout_ms: int,
    ttl_ms: int,
    low_priority: bool | int,
    webhook: str | None,
    s3_config: str | None,
    submitted_at: float,
    started_at: float | None,
    finished_at: float | None,
    output: str | None,
    error: str | None,
    worker_id: str | None,
    attempt: int,
    retries: int,
    lease_until: float | None,
    expires_at: float | None,
    retention_ms: int,
    retain_until: float | None,
    run_deadline: float | None,
    seq: int,
    caller_id: str | None,
) -> Job:
    return Job(
        id=id,
        endpoint_id=endpoint_id,
        status=JobStatus(status),
        input_json=input,
        execution_timeout_ms=execution_timeout_ms,
        ttl_ms=ttl_ms,
        low_priority=bool(low_priority),
        webhook=webhook,
        s3_config_json=s3_config,
        submitted_at=submitted_at,
        started_at=started_at,
        finished_at=finished_at,
        output_json=output,
        error=error,
        worker_id=worker_id,
        attempt=attempt,
        retries=retries,
        lease_until=lease_until,
        expires_at=expires_at if expires_at is not None else float("inf"),
        retention_ms=retention_ms,
        retain_until=retain_until,
        run_deadline=run_deadline,
        seq=seq,
        caller_id=caller_id,
    )


#: A job from a row of ``jobs`` (its other columns, ``stream_cursor``, are the store's own).
job_from_row = RowReader(_job)


def job_params(job: Job) -> dict[str, Any]:
    """The named parameters of ``insert_job`` (both drivers take the bool as is)."""
    return {
        "id": job.id,
        "endpoint_id": job.endpoint_id,
        "status": job.status.value,
        "input": job.input_json,
        "execution_timeout_ms": job.execution_timeout_ms,
        "ttl_ms": job.ttl_ms,
        "low_priority": job.low_priority,
        "webhook": job.webhook,
        "s3_config": job.s3_config_json,
        "submitted_at": job.submitted_at,
        "expires_at": job.submitted_at + job.ttl_ms / 1000.0,
        "retention_ms": job.retention_ms,
        "caller_id": job.caller_id,
    }


def claim_order(job: Job) -> tuple[bool, int]:
    """Claimed jobs are handed out in queue order: normal priority first, then oldest first."""
    return job.low_priority, job.seq


def finishes_in_progress(status: JobStatus) -> bool:
    """Whether a job in progress may move to ``status``: the guard of ``finish_job``, whose
    text allows IN_PROGRESS only."""
    return JobStatus.IN_PROGRESS in sources_of(status)


def endpoint_from_row(row: Any) -> Endpoint:
    return Endpoint(
        id=row["id"],
        userId=row["user_id"],
        spec=EndpointSpec.model_validate_json(row["spec"]),
        version=row["version"],
        createdAt=row["created_at"],
    )


def endpoint_params(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "id": endpoint.id,
        "user_id": endpoint.userId,
        "template_id": endpoint.spec.templateId,
        "spec": endpoint.spec.model_dump_json(),
        "version": endpoint.version,
        "created_at": endpoint.createdAt,
    }


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
        "address",
        "health_address",
    }
)


def worker_params(worker: Worker) -> dict[str, Any]:
    """The named parameters of ``save_worker`` and ``add_worker`` (both drivers take the bool
    as is)."""
    return {
        "id": worker.id,
        "endpoint_id": worker.endpoint_id,
        "kind": worker.kind.value,
        "state": worker.state.value,
        "version": worker.version,
        "started_at": worker.started_at,
        "last_seen": worker.last_seen,
        "idle_since": worker.idle_since,
        "pid": worker.pid,
        "gpu": worker.gpu,
        "recycle": worker.recycle,
        "gpu_ids": worker.gpu_ids,
        "owner": worker.owner,
        "address": worker.address,
        "health_address": worker.health_address,
    }


def worker_update_sql(fields: Iterable[str]) -> str:
    """The ``update_worker`` statement for these fields (checked against ``WORKER_FIELDS``), with
    named parameters like the queries in ``store/queries``: the one statement made per call,
    as the fields vary."""
    names = list(fields)
    unknown = set(names) - WORKER_FIELDS
    if unknown:
        raise ValueError(f"not worker fields: {sorted(unknown)}")
    assignments = ", ".join(f"{name} = :{name}" for name in names)
    return f"UPDATE workers SET {assignments} WHERE id = :id RETURNING *"


def worker_field_values(fields: Mapping[str, object]) -> dict[str, object]:
    """``update_worker``'s values as stored: enums as their value."""
    return {
        name: value.value if isinstance(value, enum.Enum) else value
        for name, value in fields.items()
    }


def _worker(
    id: str,
    endpoint_id: str,
    kind: str,
    state: str,
    version: int,
    started_at: float,
    last_seen: float | None,
    idle_since: float | None,
    pid: int | None,
    gpu: str | None,
    recycle: bool | int,
    gpu_ids: str | None,
    owner: str | None,
    address: str | None,
    health_address: str | None,
) -> Worker:
    return Worker(
        id=id,
        endpoint_id=endpoint_id,
        kind=WorkerKind(kind),
        state=WorkerState(state),
        version=version,
        started_at=started_at,
        last_seen=last_seen,
        idle_since=idle_since,
        pid=pid,
        gpu=gpu,
        recycle=bool(recycle),
        gpu_ids=gpu_ids,
        owner=owner,
        address=address,
        health_address=health_address,
    )


worker_from_row = RowReader(_worker)


def stream_chunk_from_row(row: Any) -> StreamChunk:
    return StreamChunk(row["seq"], row["output"], row["metrics"])


def webhook_payload(job: Job, finished_at: float) -> str:
    """The JSON body of a job's webhook: its ``/status`` body plus ``input`` and ``webhook``."""
    payload = status_view(job, finished_at)
    payload["input"] = orjson.Fragment(job.input_json)
    payload["webhook"] = job.webhook
    return orjson.dumps(payload).decode()


def webhook_delivery_params(job: Job, user_id: str, finished_at: float) -> dict[str, Any]:
    """``add_webhook_delivery`` for a job that became final: first attempt at once."""
    return {
        "id": secrets.token_hex(12),
        "job_id": job.id,
        "endpoint_id": job.endpoint_id,
        "user_id": user_id,
        "url": job.webhook,
        "payload": webhook_payload(job, finished_at),
        "next_attempt_at": finished_at,
        "created_at": finished_at,
    }


def webhook_delivery_from_row(row: Any) -> WebhookDelivery:
    """A delivery from a row of ``due_webhook_deliveries``."""
    return WebhookDelivery(
        id=row["id"],
        job_id=row["job_id"],
        endpoint_id=row["endpoint_id"],
        user_id=row["user_id"],
        url=row["url"],
        payload=row["payload"],
        status=row["status"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        secret=row["secret"],
    )


def job_counts_from(rows: Iterable[Any]) -> JobCounts:
    """``JobCounts`` from the rows of the ``job_counts`` query (``status``, ``low_priority``,
    ``n``, ``retries``); the adapter adds ``oldest_queued_at`` with a second query, only when a
    normal job waits."""
    by_status: dict[str, int] = {}
    normal_queued = 0
    retried = 0
    for row in rows:
        status, count = row["status"], int(row["n"] or 0)
        by_status[status] = by_status.get(status, 0) + count
        retried += int(row["retries"] or 0)
        if status == "IN_QUEUE" and not row["low_priority"]:
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
    return User(
        row["id"], row["name"], bool(row["is_admin"]), row["created_at"], row["disabled_at"]
    )


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
            permissions.Permissions(
                permissions.Kind(row["permissions"]),
                {e: permissions.Access(a) for e, a in orjson.loads(row["endpoints"]).items()},
            ),
        ),
        User(
            row["user_id"],
            row["user_name"],
            bool(row["is_admin"]),
            row["user_created_at"],
            row["disabled_at"],
        ),
    )


def secret_from_row(row: Any) -> Secret:
    """A secret from a row of ``list_user_secrets`` / ``get_user_secret`` (never its value)."""
    return Secret(row["id"], row["name"], row["created_at"], row["updated_at"])


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
        "permissions": str(key.permissions.kind),
        "endpoints": orjson.dumps(key.permissions.grants_json()).decode(),
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


def network_volume_from_row(row: Any) -> NetworkVolume:
    return NetworkVolume(
        id=row["id"],
        name=row["name"],
        size=row["size_gb"],
        dataCenterId=row["data_center_id"],
        createdAt=row["created_at"],
    )


def network_volume_params(user_id: str, volume: NetworkVolume) -> dict[str, Any]:
    return {
        "id": volume.id,
        "user_id": user_id,
        "name": volume.name,
        "size_gb": volume.size,
        "data_center_id": volume.dataCenterId,
        "created_at": volume.createdAt,
    }


def pod_from_row(row: Any) -> Pod:
    return Pod(
        id=row["id"],
        userId=row["user_id"],
        spec=PodSpec.model_validate_json(row["spec"]),
        desiredStatus=DesiredStatus(row["desired_status"]),
        version=row["version"],
        restarts=row["restarts"],
        createdAt=row["created_at"],
        lastStatusChange=row["last_status_change"],
        lastStartedAt=row["last_started_at"],
        placement=PodPlacement.model_validate_json(row["placement"]),
    )


def pod_settings_params(pod: Pod) -> dict[str, Any]:
    """The columns the pods service writes (``update_pod_settings``)."""
    return {
        "id": pod.id,
        "user_id": pod.userId,
        "name": pod.spec.name,
        "spec": pod.spec.model_dump_json(),
        "desired_status": pod.desiredStatus.value,
        "version": pod.version,
        "restarts": pod.restarts,
        "last_status_change": pod.lastStatusChange,
    }


def pod_params(pod: Pod) -> dict[str, Any]:
    return pod_settings_params(pod) | {
        "created_at": pod.createdAt,
        "last_started_at": pod.lastStartedAt,
        "placement": pod.placement.model_dump_json(),
    }


def usage_params(usage: Usage, subject: str, last_seen: float) -> dict[str, Any]:
    return {
        "id": usage.id,
        "subject": subject,
        "user_id": usage.user_id,
        "kind": usage.kind.value,
        "started_at": usage.started_at,
        "ended_at": usage.ended_at,
        "last_seen": last_seen,
        "endpoint_id": usage.endpoint_id,
        "pod_id": usage.pod_id,
        "instance_id": usage.instance_id,
        "volume_id": usage.volume_id,
        "gpu_type": usage.gpu_type,
        "gpu_count": usage.gpu_count,
        "cpu_flavor": usage.cpu_flavor,
        "vcpus": usage.vcpus,
        "disk_gb": usage.disk_gb,
    }


def usage_from_row(row: Any) -> Usage:
    return Usage(
        id=row["id"],
        user_id=row["user_id"],
        kind=UsageKind(row["kind"]),
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        endpoint_id=row["endpoint_id"],
        pod_id=row["pod_id"],
        instance_id=row["instance_id"],
        volume_id=row["volume_id"],
        gpu_type=row["gpu_type"],
        gpu_count=row["gpu_count"],
        cpu_flavor=row["cpu_flavor"],
        vcpus=row["vcpus"],
        disk_gb=row["disk_gb"],
    )


def _public_model(
    model_id: str, endpoint_id: str, description: str, published_by: str, created_at: float
) -> PublicModel:
    return PublicModel(model_id, endpoint_id, description, published_by, created_at)


public_model_from_row = RowReader(_public_model)


def public_model_params(model: PublicModel) -> dict[str, Any]:
    return {
        "model_id": model.model_id,
        "endpoint_id": model.endpoint_id,
        "description": model.description,
        "published_by": model.published_by,
        "created_at": model.created_at,
    }


#: How long a load-balancing demand row outlives its last refresh before it is dropped (its
#: replica is gone; it stopped counting long before, ``Balancer``).
LB_DEMAND_KEPT_SECONDS = 600.0
