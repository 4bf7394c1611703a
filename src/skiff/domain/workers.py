"""Workers as the platform sees them."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class WorkerState(enum.StrEnum):
    #: Started, not yet asking for work.
    INITIALIZING = "initializing"
    #: Asking for work, holding none.
    IDLE = "idle"
    #: Holding at least one job.
    RUNNING = "running"
    #: Wanted, but no GPU of the wanted types is free.
    THROTTLED = "throttled"
    #: Failing to start or to stay up.
    UNHEALTHY = "unhealthy"
    #: Told to stop; finishing its current job, if any.
    STOPPING = "stopping"
    #: ``flashboot``: started and imported, its take held back until a scale-up needs it.
    STANDBY = "standby"


class WorkerKind(enum.StrEnum):
    #: A process this server started and stops.
    LOCAL = "local"
    #: Started by hand elsewhere with a worker token; counted, never started or stopped.
    EXTERNAL = "external"


@dataclass(slots=True)
class Worker:
    id: str
    endpoint_id: str
    kind: WorkerKind
    state: WorkerState
    version: int
    started_at: float
    last_seen: float | None = None
    #: When it last had no job (None while it holds one).
    idle_since: float | None = None
    pid: int | None = None
    #: The GPU type it holds, and the indices (``CUDA_VISIBLE_DEVICES``), e.g. "0,1".
    gpu: str | None = None
    gpu_ids: str | None = None
    #: The handler asked for a fresh worker (``refresh_worker``): stop it after its job.
    recycle: bool = False
    #: The replica that started it (local workers): only that replica has its process.
    owner: str | None = None
    #: A load-balancing endpoint's worker: where its HTTP server answers requests, and
    #: ``GET /ping`` (``host:port``); known once its process runs. None for queue workers.
    address: str | None = None
    health_address: str | None = None

    @property
    def name(self) -> str:
        """What it calls itself (``RUNPOD_POD_ID``), as users are shown it: its id, less the
        endpoint an outside worker's is kept under (``outside_key``)."""
        return worker_name(self.id)

    @property
    def takes_work(self) -> bool:
        """False once it is told to stop or asked to be recycled."""
        return self.state is not WorkerState.STOPPING and not self.recycle

    @property
    def claims_jobs(self) -> bool:
        """Whether a claim of its would be let through: it takes work and is no standby
        (``worker_refuses_claims`` in ``store/queries/jobs.sql``)."""
        return self.takes_work and self.state is not WorkerState.STANDBY

    @property
    def is_live(self) -> bool:
        return self.state in (WorkerState.INITIALIZING, WorkerState.IDLE, WorkerState.RUNNING)

    @property
    def is_pending(self) -> bool:
        """Wanted but without a process: waiting for a GPU, or backed off after failed starts."""
        return self.state in (WorkerState.THROTTLED, WorkerState.UNHEALTHY)


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """A worker as its endpoint's pages show it: its record and the jobs it holds."""

    worker: Worker
    #: Ids of the jobs it holds, sorted.
    jobs: list[str]


#: An outside worker's id (its ``RUNPOD_POD_ID``) as the server takes a new one: short, and
#: nothing a path, a log line or a label could misread.
_OUTSIDE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
#: The most outside workers one endpoint's token may have on record at once. Each is a row
#: every pass of the server's loops reads, and any id its token names becomes one: without a
#: bound one tenant's worker could make them by the ten thousand and slow every tenant's.
MAX_OUTSIDE_WORKERS = 512


#: Between an endpoint's id and an outside worker's name in the id its record is kept under:
#: no other worker id (nor an outside worker's name) holds it.
KEY_SEPARATOR = "/"


def outside_key(endpoint_id: str, name: str) -> str:
    """The id an outside worker called ``name`` is kept under: names are the workers' own
    choice (``RUNPOD_POD_ID``), so two tenants may well pick the same, and neither may keep the
    other's from calling in, nor learn that it exists. Unique across endpoints, and no other id
    can spell it."""
    return f"{endpoint_id}{KEY_SEPARATOR}{name}"


def worker_name(worker_id: str) -> str:
    """``Worker.name`` of a worker known only by its id (a job's ``worker_id``)."""
    return worker_id.rpartition(KEY_SEPARATOR)[2]


def outside_id_problem(worker_id: str) -> str | None:
    """Why ``worker_id`` cannot be a new outside worker's id; None when it can."""
    if _OUTSIDE_ID.fullmatch(worker_id):
        return None
    return (
        f"worker id {worker_id[:40]!r} is not one: 1 to 128 letters, digits and . _ : @ -, "
        "beginning with a letter or digit"
    )
