"""The storage port. Services call these named operations; no SQL lives outside ``store/``.

Every job operation that changes state is one conditional update guarded by the states the
job may move from (``domain.jobs.sources_of``), so two racing requests cannot both win.
JobCounts, StreamChunk and User are domain types, re-exported here for the adapters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from skiff.domain.billing import Usage
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus
from skiff.domain.jobs import JobCounts as JobCounts
from skiff.domain.keys import ApiKey as ApiKey
from skiff.domain.pods import Pod, PodPlacement
from skiff.domain.public_models import PublicModel
from skiff.domain.quotas import Owned
from skiff.domain.secrets import Secret
from skiff.domain.streams import StreamChunk as StreamChunk
from skiff.domain.templates import Template
from skiff.domain.users import User as User
from skiff.domain.volumes import NetworkVolume, VolumeUsers
from skiff.domain.workers import Worker


@dataclass(frozen=True, slots=True)
class RegistryAuthRecord:
    id: str
    user_id: str
    name: str
    username: str
    password: str
    created_at: float


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    id: str
    job_id: str
    endpoint_id: str
    user_id: str
    url: str
    #: The JSON body to POST: the job's ``/status`` body plus ``input`` (never ``s3Config``).
    payload: str
    #: pending, delivered or failed.
    status: str
    attempts: int
    next_attempt_at: float
    last_error: str | None
    created_at: float
    finished_at: float | None
    #: The owner's signing secret (``whsec_...``), or None if the owner has none yet.
    secret: str | None


class Store(Protocol):
    async def open(self) -> list[str]:
        """Connect and bring the schema up to date; the names of the migrations this applied
        (none when it was up to date already)."""
        ...

    async def close(self) -> None: ...

    async def count_owned(self, kind: Owned, user_id: str) -> int:
        """How many of ``kind`` the user holds now (domain/quotas.py)."""
        ...

    # -- server secrets -------------------------------------------------------------
    async def secret(self, name: str) -> bytes:
        """A random secret created on first use and kept (worker-token signing)."""
        ...

    # -- users and API keys ---------------------------------------------------------
    async def create_user(self, user: User) -> User: ...

    async def get_user_by_name(self, name: str) -> User | None: ...

    async def add_api_key(self, key: ApiKey, key_hash: str) -> ApiKey: ...

    async def find_api_key(self, key_hash: str) -> tuple[ApiKey, User] | None:
        """The key (revoked or not) and its owner."""
        ...

    async def list_api_keys(self) -> list[tuple[ApiKey, User]]: ...

    async def list_user_api_keys(self, user_id: str) -> list[ApiKey]:
        """One user's keys, revoked ones included, oldest first."""
        ...

    async def revoke_user_api_key(self, user_id: str, key_id: str, now: float) -> bool:
        """False when the key is not the user's, or was revoked already."""
        ...

    async def get_user(self, user_id: str) -> User | None: ...

    async def list_users(self) -> list[User]: ...

    async def set_user_disabled(self, user_id: str, disabled_at: float | None) -> bool:
        """Disable (a time) or enable (None) a user; False for an unknown one."""
        ...

    async def disabled_user_ids(self) -> set[str]:
        """The ids of the users disabled now: one read for a whole pass of the scaler or the
        pod runner, whose owners' workers and pods must not run."""
        ...

    async def revoke_api_key(self, key_id: str, now: float) -> bool: ...

    # -- container registry auths ---------------------------------------------------
    async def create_registry_auth(self, auth: RegistryAuthRecord) -> RegistryAuthRecord:
        """Raises ``Conflict`` when the owner already has one of that name."""
        ...

    async def list_registry_auths(self, user_id: str) -> list[RegistryAuthRecord]: ...

    async def get_registry_auth(self, user_id: str, auth_id: str) -> RegistryAuthRecord | None: ...

    async def delete_registry_auth(self, user_id: str, auth_id: str) -> bool: ...

    async def update_registry_auth_credentials(
        self, user_id: str, auth_id: str, username: str, password: str
    ) -> bool:
        """New credentials under the same name; False when the owner has no such auth."""
        ...

    async def get_pub_key(self, user_id: str) -> str | None:
        """The user's public SSH key; None when they set none."""
        ...

    async def set_pub_key(self, user_id: str, pub_key: str) -> None: ...

    # -- users' secrets (values sealed at rest, store/sealing.py) ----------------------
    async def create_user_secret(self, user_id: str, secret: Secret, value: str) -> Secret:
        """Raises ``Conflict`` when the owner already has one of that name."""
        ...

    async def list_user_secrets(self, user_id: str) -> list[Secret]: ...

    async def get_user_secret(self, user_id: str, secret_id: str) -> Secret | None: ...

    async def update_user_secret(
        self, user_id: str, secret_id: str, value: str, now: float
    ) -> Secret | None: ...

    async def delete_user_secret(self, user_id: str, secret_id: str) -> bool: ...

    async def user_secret_values(self, user_id: str) -> dict[str, str]:
        """Every secret of the owner, name -> value in clear (for a worker's environment)."""
        ...

    # -- templates ------------------------------------------------------------------
    async def create_template(self, user_id: str, template: Template, now: float) -> Template:
        """Raises ``Conflict`` when the owner already has one of that name."""
        ...

    async def list_templates(self, user_id: str) -> list[Template]: ...

    async def get_template(self, user_id: str, template_id: str) -> Template | None: ...

    async def update_template(self, user_id: str, template: Template) -> Template: ...

    async def delete_template(self, user_id: str, template_id: str) -> bool: ...

    # -- network volumes ------------------------------------------------------------
    async def create_network_volume(self, user_id: str, volume: NetworkVolume) -> NetworkVolume:
        """Record the owner's new volume (its directory is the caller's: ``volume_dirs.py``)."""
        ...

    async def list_network_volumes(self, user_id: str) -> list[NetworkVolume]:
        """The owner's volumes, oldest first."""
        ...

    async def all_network_volumes(self) -> list[tuple[str, NetworkVolume]]:
        """Every owner's volumes as (owner, volume), oldest first (the meter)."""
        ...

    async def get_network_volume(self, user_id: str, volume_id: str) -> NetworkVolume | None:
        """None for an unknown id, and for another owner's."""
        ...

    async def update_network_volume(
        self, user_id: str, volume_id: str, name: str, size: int
    ) -> NetworkVolume | None:
        """Rename and resize in one conditional write that never shrinks: with ``size`` below
        the stored size nothing changes, even when a grow raced ahead. Returns the volume as
        stored afterwards (so a caller sees a refused shrink as another size than it asked
        for); None when the owner has no such volume."""
        ...

    async def delete_network_volume(self, user_id: str, volume_id: str) -> VolumeUsers | None:
        """Remove the volume unless an endpoint or a pod (not one being deleted) of its owner
        names it (``networkVolumeId``), checked in the same transaction. Returns those, and then
        removes nothing; empty ``VolumeUsers`` once removed; None when the owner has no such
        volume."""
        ...

    async def endpoints_using_network_volume(self, user_id: str, volume_id: str) -> list[str]:
        """Ids of the owner's endpoints whose ``networkVolumeId`` names the volume, oldest
        first."""
        ...

    # -- pods -----------------------------------------------------------------------
    async def create_pod(self, pod: Pod) -> Pod: ...

    async def list_pods(self, user_id: str | None) -> list[Pod]:
        """One owner's pods, oldest first, or everyone's with ``None`` (the pod runner)."""
        ...

    async def get_pod(self, user_id: str, pod_id: str) -> Pod | None:
        """None for an unknown id, and for another owner's."""
        ...

    async def find_pod(self, pod_id: str) -> Pod | None:
        """The pod, whoever owns it (the server's own look-ups: the pod runner, SSH's door)."""
        ...

    async def update_pod_settings(self, pod: Pod) -> Pod | None:
        """Write the pod's name, settings, desired status, version and status change time
        (never its placement, which is the runner's); None when the owner has no such pod."""
        ...

    async def stop_running_pod(self, pod_id: str, now: float) -> Pod | None:
        """Mark a pod wanted running as stopped (``EXITED``, its status changed at ``now``),
        as its owner's stop does, touching nothing else; None when it is gone or not wanted
        running (any more)."""
        ...

    async def set_pod_placement(
        self, pod_id: str, placement: PodPlacement, last_started_at: float | None
    ) -> Pod | None:
        """The runner's record of where the pod runs now (nothing else of it changes); None
        when the pod is gone."""
        ...

    async def delete_pod(self, user_id: str, pod_id: str) -> bool: ...

    # -- usage (billing) --------------------------------------------------------------
    async def open_usage(self, usage: Usage, subject: str, last_seen: float) -> bool:
        """Record ``usage`` under ``subject``: open (``ended_at`` None), unless one of that
        subject is open already (False, nothing written), or ended as it is."""
        ...

    async def open_usages(self) -> list[tuple[str, Usage, float]]:
        """Every open usage: (subject, usage, last seen), oldest first."""
        ...

    async def end_usage(self, subject: str, ended_at: float, gap: float) -> bool:
        """End the subject's open usage at ``ended_at``, but not before its start nor more than
        ``gap`` seconds after it was last seen; False when none is open."""
        ...

    async def touch_usages(self, now: float) -> None:
        """The meter saw every open usage now."""
        ...

    async def end_unseen_usages(self, before: float) -> int:
        """End every open usage last seen before ``before`` where it was last seen (the time
        no meter ran is not billed); how many."""
        ...

    async def usages_of(self, user_id: str, since: float, until: float) -> list[Usage]:
        """The user's usages that overlap ``[since, until)``, open ones included."""
        ...

    # -- endpoints ------------------------------------------------------------------
    async def create_endpoint(self, endpoint: Endpoint) -> Endpoint: ...

    async def list_endpoints(self, user_id: str | None) -> list[Endpoint]:
        """One owner's endpoints, or everyone's with ``None`` (the scaler)."""
        ...

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None: ...

    async def update_endpoint(
        self, endpoint_id: str, spec: EndpointSpec, bump_version: bool
    ) -> Endpoint | None: ...

    async def bump_endpoint_versions(self, template_id: str) -> list[str]:
        """A template changed in a way workers see: roll every endpoint that uses it."""
        ...

    async def delete_endpoint(self, endpoint_id: str, now: float) -> bool:
        """Removes the endpoint with its jobs, stream chunks and worker records; the run of each
        public model caller's job it cuts off is billed to its caller up to ``now``, in the same
        transaction."""
        ...

    async def endpoints_using_template(self, template_id: str) -> list[str]: ...

    # -- jobs -----------------------------------------------------------------------
    # Whatever ends a run of a public model's caller's job (a final state, a requeue, a removal
    # by its ttl) records that run's usage for the caller in the same transaction
    # (``domain.billing.call_usage``): a crash cannot leave the one without the other, and a
    # run is recorded once.
    async def insert_job(self, job: Job, owner_id: str | None = None) -> None:
        """``owner_id``: the endpoint's owner, whose share the job's result counts against (its
        input counts against its caller, if any, else the owner); read from the endpoint when
        not given."""
        ...

    async def get_job(self, endpoint_id: str, job_id: str) -> Job | None:
        """The row, even if its ttl or retention has passed (the caller decides with its clock)."""
        ...

    async def list_jobs(self, endpoint_id: str, limit: int, before_seq: int | None) -> list[Job]:
        """Newest first; ``before_seq`` continues a listing after its last job."""
        ...

    async def set_job_ttl(self, endpoint_id: str, job_id: str, ttl_ms: int) -> Job | None:
        """A new ttl, counted from submission."""
        ...

    async def time_out_jobs(self, now: float) -> list[Job]:
        """Running jobs past their execution deadline become TIMED_OUT; their workers get a
        stop signal. Returns those jobs."""
        ...

    async def expire_jobs(self, now: float, limit: int) -> list[Job]:
        """Delete jobs past their ttl (whatever their state; a running one's worker gets a stop
        signal) or past their retention. Returns them as they were."""
        ...

    async def claim_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        """Hand the oldest queued jobs (normal priority first) to a worker, atomically. A worker
        recorded as stopping or standby (or to be recycled) gets none; one that gets some is
        running."""
        ...

    async def line_up_jobs(
        self, endpoint_id: str, worker_id: str, limit: int, now: float, lease_until: float
    ) -> list[Job]:
        """Hand a worker up to ``limit`` more queued jobs to run after the one it is running
        (services/lineup.py): they stay IN_QUEUE, with the worker and ``lease_until`` recorded,
        so no other worker claims them and ``/status`` still says they wait; each starts
        (IN_PROGRESS, ``started_at``, its execution deadline, an attempt) only when the worker
        finishes the job before it (``finish_job``) or is told to stop it
        (``take_stop_signals``). Returned in claim order, the order the worker runs them; a
        worker that ``claim_jobs`` would refuse gets none."""
        ...

    async def record_progress(self, job_id: str, worker_id: str, output_json: str | None) -> bool:
        """A progress update: the job stays IN_PROGRESS and shows this output."""
        ...

    async def finish_job(
        self,
        job_id: str,
        worker_id: str | None,
        status: JobStatus,
        output_json: str | None,
        error: str | None,
        now: float,
    ) -> Job | None:
        """Move an IN_PROGRESS job (held by ``worker_id`` when given) to a final state; the
        worker lets go of it in the same transaction (as ``let_go_of_jobs``), and the next job
        lined up on it starts (``line_up_jobs``). When that one is no longer wanted (cancelled,
        purged, expired), nothing starts and the job returned says ``line_broken``: the worker
        would start it on its own and must be ended first (it gets a stop signal too). A result
        for a job still lined up on the worker means it started without the store hearing: it is
        started and finished here. ``None`` when the job is gone, final already, or held by
        another worker."""
        ...

    async def cancel_job(self, endpoint_id: str, job_id: str, now: float) -> Job | None:
        """Cancel a queued or running job; a running one is flagged for job-stop.
        Returns the job as it is afterwards (unchanged if it was final), ``None`` if unknown."""
        ...

    async def retry_job(self, endpoint_id: str, job_id: str) -> Job | None:
        """FAILED or TIMED_OUT -> IN_QUEUE with output, error and stream cleared.
        Returns the job as it is afterwards; the caller checks whether it moved."""
        ...

    async def purge_queue(self, endpoint_id: str) -> int: ...

    async def job_counts(self, endpoint_id: str) -> JobCounts:
        """Read from counters kept by the store, not by scanning the endpoint's jobs."""
        ...

    async def job_bytes_of(self, user_id: str) -> int:
        """What the jobs ``user_id`` submitted hold in the database, in bytes (their inputs,
        webhooks, S3 settings, results, errors and streams), from counters kept by the store."""
        ...

    async def fold_job_counts(self) -> int:
        """Fold the count and byte deltas written since the last fold; returns how many
        (one replica, the leader, calls it regularly so the deltas stay few)."""
        ...

    async def append_stream_chunks(
        self,
        job_id: str,
        worker_id: str,
        chunks: list[tuple[str, str | None]],
        max_size: int | None = None,
    ) -> bool:
        """Append (output JSON, metrics JSON) chunks in order, if the worker holds the job.
        Raises ``StreamFull``, keeping none of them, when they would take the job's stream past
        ``max_size`` (``domain.results.stream_size``; None: no cap)."""
        ...

    async def read_new_stream_chunks(self, job_id: str) -> list[StreamChunk]:
        """Chunks not returned before, in order; advances the job's read cursor."""
        ...

    async def job_held_by(self, job_id: str, worker_id: str, lined_up: bool = False) -> bool:
        """Whether the worker runs the job now (what a stream chunk of it needs), or with
        ``lined_up`` has it lined up (a result for it is taken too)."""
        ...

    async def stream_chunks_after(self, job_id: str, after: int) -> list[StreamChunk]:
        """Chunks whose ``seq`` is above ``after``, in order; the job's read cursor stays."""
        ...

    async def take_stop_signals(self, worker_id: str, now: float) -> list[str]:
        """Ids of jobs this worker must stop (cancelled, timed out, expired); each once. The
        signal itself stays until the worker lets go of the job (``let_go_of_jobs``). A worker
        told to stop the job it ran, holding no other, starts its next lined-up job."""
        ...

    async def lineup_broken(self, worker_id: str) -> bool:
        """Whether the worker runs no job and the first job lined up on it is no longer wanted
        (cancelled, purged, expired): it has that job queued and will start it on its own.
        ``finish_job`` says the same on the job it returns (``Job.line_broken``)."""
        ...

    async def let_go_of_jobs(self, worker_id: str, job_ids: list[str] | None, now: float) -> None:
        """The worker let go of these jobs (all, with ``None``): forget their stop signals, and
        a running worker that holds no job any more becomes idle. Several let-gos of one worker
        at once (``finish_job`` included, from separate connections or replicas) still leave it
        idle once it holds nothing, and a claim racing them leaves it running."""
        ...

    async def overdue_stop_workers(self, signalled_before: float) -> list[str]:
        """Workers still holding a job they were told to stop before the given time."""
        ...

    async def renew_leases(self, worker_id: str, job_ids: list[str], lease_until: float) -> None:
        """Renew the leases of the listed jobs the worker holds; when it holds any of them, the
        jobs lined up on it too (the SDK lists a lined-up job only once it queued it)."""
        ...

    async def release_jobs(
        self,
        worker_id: str | None,
        now: float,
        max_attempts: int,
        reason: str,
        alive_until: float | None = None,
        *,
        counted: bool = True,
    ) -> list[Job]:
        """Jobs held by a lost worker (or, with ``None``, any job whose lease lapsed) go back
        to the queue; those that used up their attempts are FAILED with ``reason``. Jobs lined
        up on it that never started go back as they were, no attempt counted. A caller's job
        queued again is billed the attempt it ran up to ``now``, or to ``alive_until`` (when
        its worker was last seen) where that is earlier. ``counted=False`` (a worker's only):
        the worker was ended for no fault of its jobs, so none fails and each goes back with
        the attempt it ran given back."""
        ...

    # -- webhooks -------------------------------------------------------------------------
    async def webhook_secret(self, user_id: str, rotate: bool = False) -> str:
        """The user's signing secret, made on first use; ``rotate`` replaces it."""
        ...

    async def prune_webhook_deliveries(self, before: float, limit: int) -> int:
        """Remove up to ``limit`` deliveries that ended (delivered or failed for good) before
        ``before``; returns how many."""
        ...

    async def due_webhook_deliveries(self, now: float, limit: int) -> list[WebhookDelivery]: ...

    async def record_webhook_attempt(
        self,
        delivery_id: str,
        status: str,
        error: str | None,
        now: float,
        next_attempt_at: float | None,
    ) -> None:
        """Count an attempt; ``status`` pending (with the next time), delivered or failed."""
        ...

    # -- workers --------------------------------------------------------------------
    async def save_worker(self, worker: Worker) -> None:
        """Insert or replace the whole record (the owner's own writes at start-up)."""
        ...

    async def add_worker(self, worker: Worker) -> Worker:
        """Insert unless a record with that id exists; returns the stored record."""
        ...

    async def update_worker(self, worker_id: str, fields: Mapping[str, object]) -> Worker | None:
        """Set only the given columns (``rows.WORKER_FIELDS``), so replicas writing different
        fields of one worker do not undo each other; returns the record, None if gone."""
        ...

    async def touch_worker(self, worker_id: str, endpoint_id: str, now: float) -> Worker | None:
        """The worker of ``endpoint_id`` called in: note when, and one that was starting is now
        idle. None when that endpoint has no such worker (another's is left as it is)."""
        ...

    async def set_lb_demand(
        self, replica_id: str, endpoint_id: str, in_flight: int, waiting: int, now: float
    ) -> None:
        """The requests this replica holds for a load-balancing endpoint now (none: its row
        goes). Rows not refreshed for ten minutes (replicas gone) are dropped on the way."""
        ...

    async def lb_demand_of_others(
        self, replica_id: str, since: float
    ) -> dict[str, tuple[int, int]]:
        """(in flight, waiting) per endpoint, summed over the other replicas' rows refreshed
        since ``since``."""
        ...

    # -- public model endpoints --------------------------------------------------------------

    async def publish_model(self, model: PublicModel) -> bool:
        """False, writing nothing, when the model id or the endpoint is published already."""
        ...

    async def public_models(self) -> list[PublicModel]: ...

    async def public_model(self, model_id: str) -> PublicModel | None: ...

    async def unpublish_model(self, model_id: str) -> bool: ...

    async def worker_ready(self, worker_id: str, now: float) -> Worker | None:
        """A load-balancing worker answered its first ``GET /ping`` with 200: a starting one
        becomes idle (None, changing nothing, when it is not starting any more)."""
        ...

    async def worker_serving(self, worker_id: str, busy: bool, now: float) -> Worker | None:
        """A load-balancing worker has requests in flight (``busy``: running) or none (idle,
        from ``now``). Only an idle or running worker moves: one told to stop stays stopping
        (None)."""
        ...

    async def get_worker(self, worker_id: str) -> Worker | None: ...

    async def list_workers(self, endpoint_id: str | None) -> list[Worker]: ...

    async def delete_worker(self, worker_id: str) -> None: ...

    async def jobs_of_worker(self, worker_id: str) -> list[str]:
        """Jobs the worker holds: running ones, lined-up ones, and stopped ones it has not let
        go of yet."""
        ...

    async def set_worker_failure(self, endpoint_id: str, failure_json: str | None) -> None:
        """The endpoint's latest failed worker start (None clears it)."""
        ...

    async def worker_failure(self, endpoint_id: str) -> str | None: ...
