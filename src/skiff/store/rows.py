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
from skiff.domain.jobs import Job, JobCounts, JobStatus, sources_of, status_view
from skiff.domain.keys import ApiKey
from skiff.domain.pods import DesiredStatus, Pod, PodPlacement, PodSpec
from skiff.domain.public_models import PublicModel
from skiff.domain.results import utf8_length
from skiff.domain.secrets import Secret
from skiff.domain.streams import StreamChunk
from skiff.domain.templates import Template
from skiff.domain.users import User
from skiff.domain.volumes import NetworkVolume
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.store.base import RegistryAuthRecord, WebhookDelivery

T = TypeVar("T")


class RowReader(Generic[T]):
    """Makes a ``T`` from a row by column name: the columns are the parameter names of
    ``make`` (a dataclass whose fields are named as the columns, or a function), so the one
    callable says which column becomes what. ``convert`` turns the stored value of a column
    into what ``make`` takes: an enum from its value, a bool from SQLite's 0 or 1."""

    def __init__(self, make: Callable[..., T], /, **convert: Callable[[Any], Any]) -> None:
        self.columns = tuple(inspect.signature(make).parameters)
        self._by_name = operator.itemgetter(*self.columns)
        unknown = convert.keys() - set(self.columns)
        if unknown:
            raise ValueError(f"not columns of {make!r}: {sorted(unknown)}")
        self._make = _converting(make, [(self.columns.index(c), f) for c, f in convert.items()])

    def __call__(self, row: Any) -> T:
        """From a row read by name (asyncpg's Record, a dict)."""
        return self._make(*self._by_name(row))

    def for_columns(self, columns: Sequence[str]) -> Callable[[Sequence[Any]], T]:
        """For rows that come as plain tuples of these columns (sqlite3): each column found by
        name once, here, instead of on every row."""
        pick = operator.itemgetter(*(columns.index(name) for name in self.columns))
        make = self._make
        return lambda row: make(*pick(row))


def _converting(
    make: Callable[..., T], steps: list[tuple[int, Callable[[Any], Any]]]
) -> Callable[..., T]:
    """``make`` taking its arguments as stored, each position in ``steps`` converted first."""
    if not steps:
        return make

    def converted(*values: Any) -> T:
        args = list(values)
        for at, step in steps:
            args[at] = step(args[at])
        return make(*args)

    return converted


def _stored(value: object) -> object:
    """A value as a query binds it: an enum as its value, anything else as it is (both drivers
    take a bool as is)."""
    return value.value if isinstance(value, enum.Enum) else value


def _params(obj: object, *names: str) -> dict[str, Any]:
    """The named parameters of a write whose columns are named as ``obj``'s attributes: each
    attribute of ``names`` under its own name, as stored (``_stored``)."""
    return {name: _stored(getattr(obj, name)) for name in names}


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


#: A job from a row of ``jobs`` (its other columns, ``stream_cursor`` and ``stream_size``, are
#: the store's own).
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
    """The named parameters of ``save_worker`` and ``add_worker``: the columns fixed when a
    worker is made, and those ``update_worker`` may set."""
    return _params(worker, "id", "endpoint_id", "kind", *sorted(WORKER_FIELDS))


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
    """``update_worker``'s values as stored (``_stored``)."""
    return {name: _stored(value) for name, value in fields.items()}


worker_from_row = RowReader(Worker, kind=WorkerKind, state=WorkerState, recycle=bool)


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
        # What of the payload the endpoint owner's worker wrote (job_bytes.sql counts it
        # against the owner, the rest against ``user_id``): the payload holds it as it is.
        "written_bytes": utf8_length(job.output_json or "") + utf8_length(job.error or ""),
        "next_attempt_at": finished_at,
        "created_at": finished_at,
    }


#: A delivery from a row of ``due_webhook_deliveries``.
webhook_delivery_from_row = RowReader(WebhookDelivery)


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


user_from_row = RowReader(User, is_admin=bool)


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


#: A secret from a row of ``list_user_secrets`` / ``get_user_secret`` (never its value).
secret_from_row = RowReader(Secret)

registry_auth_from_row = RowReader(RegistryAuthRecord)


# Named parameters of the account and template writes, one mapping for both adapters' queries
# (store/queries/*.sql).
def user_params(user: User) -> dict[str, Any]:
    return _params(user, "id", "name", "is_admin", "created_at")


def api_key_params(key: ApiKey, key_hash: str) -> dict[str, Any]:
    return _params(key, "id", "user_id", "hint", "label", "created_at") | {
        "key_hash": key_hash,
        "permissions": str(key.permissions.kind),
        "endpoints": orjson.dumps(key.permissions.grants_json()).decode(),
    }


def registry_auth_params(auth: RegistryAuthRecord) -> dict[str, Any]:
    return _params(auth, *registry_auth_from_row.columns)


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


usage_from_row = RowReader(Usage, kind=UsageKind)


def usage_params(usage: Usage, subject: str, last_seen: float) -> dict[str, Any]:
    """``open_usage``: the interval's columns, and what it is the use of (``subject``)."""
    return _params(usage, *usage_from_row.columns) | {"subject": subject, "last_seen": last_seen}


public_model_from_row = RowReader(PublicModel)


def public_model_params(model: PublicModel) -> dict[str, Any]:
    return _params(model, *public_model_from_row.columns)


#: How long a load-balancing demand row outlives its last refresh before it is dropped (its
#: replica is gone; it stopped counting long before, ``Balancer``).
LB_DEMAND_KEPT_SECONDS = 600.0
