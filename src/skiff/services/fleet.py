"""Starting and stopping this replica's own workers, and what happens when one ends.

Only the leader replica runs the scaler, so only it starts local workers; each is recorded with
its owner (this replica's id). A worker owned by a replica that died is cleaned up by whichever
replica leads next (``sweep_dead``): its process died with its replica.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
from attrs import define, field

from skiff.clock import Clock
from skiff.config import Settings
from skiff.datadir import folders
from skiff.domain.balancing import PortProblem, container_ports, separate_health_port
from skiff.domain.containers import cpu_limits
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointType
from skiff.domain.exit_causes import exit_cause
from skiff.domain.gpus import Gpu
from skiff.domain.keys import LB_KEY_VARIABLE
from skiff.domain.placement import (
    Blocker,
    BlockerCause,
    gpus_busy_blocker,
    missing_gpus,
    worker_limit_blocker,
)
from skiff.domain.templates import Template
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.ids import made_by_short_id, short_id
from skiff.providers.base import (
    ContainerSpec,
    Launch,
    RegistryCredentials,
    ServedPorts,
    SpansMachines,
    WorkerProvider,
    WorkerStartError,
)
from skiff.served_ports import ServedPortPool, reserved_ports
from skiff.services.auth import Auth
from skiff.services.dispatch import Dispatch
from skiff.services.flash_workers import as_run
from skiff.services.gpus import GpuPool
from skiff.services.isolation import Isolation
from skiff.services.logs import WorkerLogs
from skiff.services.secrets import resolved_env
from skiff.services.volumes import Volumes
from skiff.services.worker_exits import WorkerExits
from skiff.services.workers import Workers
from skiff.store.base import Store
from skiff.tenant_trees import remove_tree

log = logging.getLogger(__name__)

#: A worker that exits sooner than this after its start counts as a failed start.
QUICK_EXIT_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 60.0
#: How much of a crashed worker's log the endpoint's status shows.
LOG_LINES_SHOWN = 20


@dataclass(frozen=True, slots=True)
class WorkerFailure:
    error: str
    failed_starts: int
    at: float
    next_start_at: float
    last_log_lines: list[str]

    def to_json(self) -> str:
        return orjson.dumps(dataclasses.asdict(self)).decode()

    @classmethod
    def from_json(cls, text: str) -> WorkerFailure:
        return cls(**orjson.loads(text))


@dataclass(frozen=True, slots=True)
class Backoff:
    """An endpoint's failed starts in a row, when the last of them was, and the earliest its
    next worker may start."""

    failures: int
    last_at: float
    not_before: float


def backoff_delay(failures: int) -> float:
    """Seconds before the next start after ``failures`` failed starts in a row: 1, 2, 4, ...
    up to MAX_BACKOFF_SECONDS. The power is bounded, since ``2.0 ** 1024`` overflows and an
    endpoint failing for a day gets there."""
    return min(MAX_BACKOFF_SECONDS, 2.0 ** min(failures - 1, 16))


@dataclass(slots=True)
class OwnWorker:
    """What this replica knows of one of its own workers beyond its record: kept from its start
    until its exit has been handled, and dropped once nothing here is left to say."""

    #: The endpoint of a process this replica started (or took over) and that has not exited.
    endpoint_id: str | None = None
    #: The start under way in the background, for a provider whose starts may take minutes (an
    #: image pull): the scaler's pass never waits for one.
    start: asyncio.Task[None] | None = None
    #: Being stopped by this replica: no other pass stops it again meanwhile.
    reaping: bool = False
    #: Ended for not calling in by the start-up deadline: its exit is a failed start, not the
    #: stop it looks like.
    failed_start: bool = False
    #: Its start-up check failed (``unfit``): its failure is recorded already.
    unfit: bool = False
    #: Ended because this replica stops leading or shuts down: its exit is the stop it asked
    #: for, however soon after its start it comes.
    ending: bool = False
    #: Stopped because its owner is disabled: its jobs' attempts are given back at its exit,
    #: even if the owner is enabled again during its grace.
    for_owner: bool = False

    @property
    def idle(self) -> bool:
        """Nothing left to say: the record can go."""
        return (
            self.endpoint_id is None
            and self.start is None
            and not (
                self.reaping or self.failed_start or self.unfit or self.ending or self.for_owner
            )
        )


@define(eq=False, repr=False, slots=False)
class Fleet:
    _settings: Settings
    _store: Store
    _clock: Clock
    _workers: Workers
    _dispatch: Dispatch
    _auth: Auth
    _gpus: GpuPool
    #: Runs the processes and reports each one's end to ``exits``.
    provider: WorkerProvider
    _exits: WorkerExits
    _logs: WorkerLogs
    #: The most worker processes this replica runs at once (``SKIFF_MAX_WORKERS``).
    worker_limit: int
    #: Finds the directory of an endpoint's network volume.
    _volumes: Volumes
    _isolation: Isolation
    _backoff: dict[str, Backoff] = field(init=False, factory=dict)
    _stopping: set[asyncio.Task[None]] = field(init=False, factory=set)
    #: Endpoints whose recorded failure this replica has cleared since it began leading.
    _cleared: set[str] = field(init=False, factory=set)
    #: worker id -> what this replica knows of it beyond its record (``OwnWorker``).
    _own: dict[str, OwnWorker] = field(init=False, factory=dict)
    #: endpoint id -> the cause last logged for holding its workers back (logged once).
    _said: dict[str, str] = field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        self._exits.subscribe(self.on_exit)
        self._ports = ServedPortPool(reserved_ports())

    def _of(self, worker_id: str) -> OwnWorker:
        """The worker's own record as it stands (an empty one when there is none: read only)."""
        return self._own.get(worker_id) or OwnWorker()

    def _mark(self, worker_id: str, **fields: object) -> None:
        """Change the worker's own record, dropping it once it has nothing left to say."""
        record = self._own.setdefault(worker_id, OwnWorker())
        for name, value in fields.items():
            setattr(record, name, value)
        if record.idle:
            del self._own[worker_id]

    def holding_homes(self, endpoint_id: str) -> list[str]:
        """The ids of this replica's workers of the endpoint that hold a home here: their
        process runs, or is being started (its home may be made at any moment)."""
        return [wid for wid, own in self._own.items() if own.endpoint_id == endpoint_id]

    def endpoints_held(self) -> set[str]:
        """The endpoints of which this replica runs or starts workers, processes or
        containers: what mounts an endpoint's network volume here."""
        return {own.endpoint_id for own in self._own.values() if own.endpoint_id is not None}

    def homes_root(self) -> Path:
        """Where every endpoint's ``homes`` are on this host."""
        return self._settings.data_dir / "workers"

    def homes(self, endpoint_id: str) -> Path:
        """Where the endpoint's workers' homes are: one directory, which the sandbox of the
        endpoint's fork server makes writable (providers/fork_server.py)."""
        return self.homes_root() / endpoint_id

    def home(self, endpoint_id: str, worker_id: str) -> Path:
        return self.homes(endpoint_id) / worker_id / "home"

    async def environment(
        self, endpoint: Endpoint, worker: Worker, env: dict[str, str]
    ) -> dict[str, str]:
        """The worker's environment: the server's own minus its secrets, then the template's
        and the endpoint's variables, then the worker protocol's and its GPU pinning, which
        always win."""
        worker_id = worker.id
        # As the worker reaches the server: a container sees the host through its gateway.
        base = self.provider.worker_url(self._settings.base_url())
        ep = endpoint.id
        query = "?gpu=" + ("cpu" if endpoint.spec.computeType is ComputeType.CPU else "gpu")
        inherited = self.provider.host_environment()
        protocol = {
            "RUNPOD_WEBHOOK_GET_JOB": f"{base}/v2/{ep}/job-take/$ID{query}",
            "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/v2/{ep}/job-done/$RUNPOD_POD_ID/$ID{query}",
            "RUNPOD_WEBHOOK_POST_STREAM": f"{base}/v2/{ep}/job-stream/$RUNPOD_POD_ID/$ID{query}",
            "RUNPOD_WEBHOOK_PING": f"{base}/v2/{ep}/ping/$RUNPOD_POD_ID{query}",
            "RUNPOD_PING_INTERVAL": str(self._settings.ping_interval_ms),
            "RUNPOD_AI_API_KEY": await self._auth.worker_token(ep),
            "RUNPOD_POD_ID": worker_id,
            "RUNPOD_ENDPOINT_ID": ep,
            "RUNPOD_POD_HOSTNAME": socket.gethostname(),
            "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
            "RUNPOD_SKIP_GPU_CHECK": "true",
            "HOME": str(self.home(endpoint.id, worker_id).resolve()),
        }
        if endpoint.spec.type is EndpointType.LB:
            # Requests through skiff's proxy carry it (``keys.lb_key``): the worker can tell
            # them from another tenant's, which may reach its port on this host's loopback.
            protocol[LB_KEY_VARIABLE] = await self._auth.lb_key(ep)
        if endpoint.spec.computeType is ComputeType.CPU:
            protocol["CUDA_VISIBLE_DEVICES"] = ""
        else:
            # NVML numbers GPUs by PCI bus; CUDA, by default, fastest first. Make CUDA count the
            # way the indices were chosen, or a mixed host would pin the wrong cards.
            protocol["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            protocol["CUDA_VISIBLE_DEVICES"] = worker.gpu_ids or ""
            protocol["NVIDIA_VISIBLE_DEVICES"] = worker.gpu_ids or "none"
        return {"PYTHONUNBUFFERED": "1"} | inherited | env | protocol

    async def start_worker(self, endpoint: Endpoint, standby: bool = False) -> Worker | None:
        """A new worker for the endpoint: started at once, or ``throttled`` (recorded, without a
        process) when no GPU of the wanted types is free. None when it cannot start at all.
        A ``standby`` worker (flashboot) is held back from jobs until it is promoted."""
        worker = await self._workers.add(
            Worker(
                id=short_id(),
                endpoint_id=endpoint.id,
                kind=WorkerKind.LOCAL,
                state=WorkerState.THROTTLED,
                version=endpoint.version,
                started_at=self._clock.now(),
            )
        )
        return await self._launch(endpoint, worker, standby)

    async def promote(self, worker: Worker) -> None:
        """Put a standby worker to work: its held take claims the next job at once. One never
        heard from (a queue worker that has not polled yet, a load-balancing worker that has
        not passed ``GET /ping``) is still starting, as any new one is: ``initializing``, so
        the scaler waits for it instead of starting another for the job it is about to take,
        and a load-balancing one gets traffic from its first 200."""
        unproven = worker.last_seen is None
        await self._workers.set_state(
            worker, WorkerState.INITIALIZING if unproven else WorkerState.IDLE
        )
        self._dispatch.wake_pollers(worker.endpoint_id)

    async def demote(self, worker: Worker) -> None:
        """Hold an idle worker back as the endpoint's standby instead of stopping it."""
        await self._workers.set_state(worker, WorkerState.STANDBY)

    async def retry_pending(self, endpoint: Endpoint) -> None:
        """Give throttled workers a GPU that freed up, and replace unhealthy ones once their
        back-off has passed."""
        for worker in await self._workers.of_endpoint(endpoint.id):
            if worker.kind is not WorkerKind.LOCAL or worker.owner != self._workers.replica_id:
                continue
            backed_off = not self.may_start(endpoint.id)
            if (
                worker.state is WorkerState.THROTTLED
                and worker.version == endpoint.version
                and not backed_off
            ):
                if self.running_count() >= self.worker_limit:
                    return  # no room: leave them throttled without touching the store
                if await self._launch(endpoint, worker) is None:
                    return
            elif worker.state is WorkerState.UNHEALTHY and self.may_start(endpoint.id):
                await self._workers.remove(worker.id)
                if await self.start_worker(endpoint) is None:
                    return

    async def _launch(
        self, endpoint: Endpoint, worker: Worker, standby: bool = False
    ) -> Worker | None:
        template = await self._store.get_template(endpoint.userId, endpoint.spec.templateId)
        if template is not None:
            image = self._settings.flash_image
            template = as_run(template, self.provider.runs_images, image, self.homes(endpoint.id))
        argv = [*template.dockerEntrypoint, *template.dockerStartCmd] if template else []
        # A container without a command of the template's runs its image's own.
        if template is None or (not argv and not self.provider.runs_images):
            await self._fail(
                endpoint.id,
                f"template {endpoint.spec.templateId} not found"
                if template is None
                else "the template has no dockerEntrypoint or dockerStartCmd: nothing to run",
            )
            await self._workers.remove(worker.id)
            return None
        volume = None
        if endpoint.spec.networkVolumeId is not None:
            volume = await self._volumes.directory(endpoint.userId, endpoint.spec.networkVolumeId)
            if volume is None:  # deleted while an endpoint was being attached to it
                await self._fail(
                    endpoint.id,
                    f"network volume {endpoint.spec.networkVolumeId} not found: attach another "
                    "or set networkVolumeId to null",
                )
                await self._workers.remove(worker.id)
                return None
        # Secrets referred to as {{ RUNPOD_SECRET_name }} in clear, here only (services/secrets.py).
        env = await resolved_env(self._store, endpoint.userId, template.env | endpoint.spec.env)
        credentials = None
        if self.provider.runs_images and template.containerRegistryAuthId:
            auth = await self._store.get_registry_auth(
                endpoint.userId, template.containerRegistryAuthId
            )
            if auth is None:
                await self._fail(
                    endpoint.id,
                    f"container registry auth {template.containerRegistryAuthId} not found",
                )
                await self._workers.remove(worker.id)
                return None
            credentials = RegistryCredentials(auth.username, auth.password)
        verdict = await self._isolation.verdict(self.provider, endpoint.userId)
        if verdict.refused is not None:
            # Another user's code without a sandbox: held back until the host can make one.
            blocker = Blocker(BlockerCause.NO_SANDBOX, verdict.refused)
            return await self._blocked(endpoint, worker, standby, blocker)
        if self.running_count() >= self.worker_limit:
            # The server runs all the workers it may: this one waits for room.
            return await self._blocked(
                endpoint,
                worker,
                standby,
                worker_limit_blocker(self.running_count(), self.worker_limit),
            )
        gpus: list[Gpu] | None = []
        if endpoint.spec.computeType is ComputeType.GPU:
            gpus = self._gpus.allocate(worker.id, endpoint.spec.gpuTypeIds, endpoint.spec.gpuCount)
            if gpus is None:
                # Wanted, but every listed type is full (it starts as soon as a GPU frees up),
                # or the server has none that fit (it waits until the endpoint changes).
                blocker = missing_gpus(endpoint.spec, self._gpus.gpus) or gpus_busy_blocker(
                    endpoint.spec
                )
                return await self._blocked(endpoint, worker, standby, blocker)
            worker.gpu = gpus[0].name
            worker.gpu_ids = ",".join(str(g.index) for g in gpus)
        serves = None
        if endpoint.spec.type is EndpointType.LB:
            try:
                serves = self._served_ports(env)
            except (PortProblem, OSError) as exc:
                self._gpus.release(worker.id)
                await self._fail(endpoint.id, f"the worker's ports: {exc}")
                await self._workers.remove(worker.id)
                return None
        full_env = await self.environment(endpoint, worker, env)
        if serves is not None:
            full_env |= {"PORT": str(serves.port), "PORT_HEALTH": str(serves.health_port)}
        launch = Launch(
            worker_id=worker.id,
            endpoint_id=endpoint.id,
            argv=argv,
            env=full_env,
            home=self.home(endpoint.id, worker.id),
            homes=self.homes(endpoint.id),
            volume=volume,
            container=container_spec(endpoint, template, worker, credentials)
            if self.provider.runs_images
            else None,
            serves=serves,
            gpus=tuple(gpus or ()),
            vcpus=limits.vcpus if (limits := cpu_limits(endpoint.spec)) else None,
            memory_bytes=limits.memory_bytes if limits else None,
            sandboxed=verdict.sandboxed,
            user_id=endpoint.userId,
        )
        # Recorded as starting before the process exists: once it runs it may call any
        # replica, which then only moves it on from there.
        worker.started_at = self._clock.now()
        worker.state = WorkerState.STANDBY if standby else WorkerState.INITIALIZING
        self._mark(worker.id, endpoint_id=endpoint.id)
        await self._workers.add(worker)
        if self.provider.slow_starts:
            task = asyncio.create_task(self._start_in_background(endpoint, worker, launch))
            self._mark(worker.id, start=task)
            return worker
        return worker if await self._start(endpoint, worker, launch) else None

    def _served_ports(self, env: dict[str, str]) -> ServedPorts:
        """A load-balancing worker's ``PORT`` and ``PORT_HEALTH``. A container has a network of
        its own: the template's (or the default) ports, published by the provider. A process
        shares this host's: it is given free ports, whatever the template says, so that two of
        them never collide, from those no other tenant can take first (``served_ports.py``)."""
        if self.provider.runs_images:
            port, health = container_ports(env)
            return ServedPorts(port, health)
        port = self._ports.take()
        return ServedPorts(port, self._ports.take() if separate_health_port(env) else port)

    async def _start(self, endpoint: Endpoint, worker: Worker, launch: Launch) -> bool:
        """Have the provider start the worker's process; False when it could not."""
        try:
            pid = await self.provider.start(launch)
        except OSError as exc:
            self._start_failed(worker.id)
            await self._workers.remove(worker.id)
            await self._fail(endpoint.id, f"the worker command could not start: {exc}")
            return False
        except WorkerStartError as exc:
            # Kept as unhealthy (no process), like a worker that exits right after its start:
            # the scaler replaces it after the back-off; its log holds what the start said.
            self._start_failed(worker.id)
            worker.state = WorkerState.UNHEALTHY
            worker.gpu = worker.gpu_ids = None
            await self._workers.add(worker)
            await self._fail(endpoint.id, str(exc), worker.id)
            return False
        finally:
            # Past this point a stop goes to the process, not to the start.
            self._mark(worker.id, start=None)
        fields: dict[str, object] = {"pid": pid}
        if launch.serves is not None:
            served = self.provider.served_at(worker.id)
            if served is None:
                # Docker published no port for it: unreachable, so no use running.
                await self._fail(endpoint.id, f"worker {worker.id}: its ports were not published")
                self._mark(worker.id, failed_start=True)
                await self.provider.stop(worker.id, 0)
                return False
            fields |= {"address": served.address, "health_address": served.health_address}
        if self.provider.slow_starts:
            # The start-up deadline and a quick exit count from when the process began, not
            # from before a pull of many minutes.
            fields["started_at"] = self._clock.now()
        await self._workers.update(worker, **fields)
        self._said.pop(endpoint.id, None)
        return True

    def _start_failed(self, worker_id: str) -> None:
        self._gpus.release(worker_id)
        self._mark(worker_id, endpoint_id=None)

    async def _start_in_background(
        self, endpoint: Endpoint, worker: Worker, launch: Launch
    ) -> None:
        try:
            await self._start(endpoint, worker, launch)
        except asyncio.CancelledError:
            # The start was given up (``_halt``): the provider removes a process that appears
            # after all, and the worker ended as far as everything else is concerned. Not
            # raised on: the cancel was this start's answer, not the task's.
            self._mark(worker.id, start=None)
            await self.on_exit(worker.id, -1)
        except Exception:
            log.exception("starting worker %s failed", worker.id)
            self._start_failed(worker.id)
            await self._workers.remove(worker.id)

    def starting(self, worker_id: str) -> bool:
        """Whether the worker's start is still under way (its image being pulled)."""
        return self._of(worker_id).start is not None

    async def _halt(self, worker_id: str) -> None:
        """End a worker's process: SIGTERM, the grace, SIGKILL; or, while its start is still
        under way, give the start up (its exit is reported as for any ended worker)."""
        task = self._of(worker_id).start
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
            if worker_id not in self.provider.running():
                return
        await self.provider.stop(worker_id, self._settings.worker_stop_grace_seconds)

    async def _blocked(
        self, endpoint: Endpoint, worker: Worker, standby: bool, blocker: Blocker
    ) -> Worker | None:
        """Keep a wanted worker ``throttled`` (recorded, without a process) for want of room,
        saying why in the log once per endpoint and cause."""
        if self._said.get(endpoint.id) != blocker.cause:
            self._said[endpoint.id] = blocker.cause
            log.warning("endpoint %s: %s", endpoint.id, blocker.reason)
        if standby:
            # A standby is a nicety, not a want: no room, no standby.
            await self._workers.remove(worker.id)
            return None
        if worker.state is not WorkerState.THROTTLED:
            await self._workers.set_state(worker, WorkerState.THROTTLED)
        return worker

    async def unsandboxed(self, endpoint: Endpoint) -> str | None:
        """Why the endpoint's workers may not start on this server without a sandbox; None
        when they may start (services/isolation.py)."""
        return (await self._isolation.verdict(self.provider, endpoint.userId)).refused

    def running_count(self) -> int:
        """Worker processes this replica runs, those on their way out included."""
        return sum(1 for own in self._own.values() if own.endpoint_id is not None)

    async def end_failed_start(self, worker: Worker) -> None:
        """A worker that has not called in by the start-up deadline: counted as a failed start
        (back-off, ``lastWorkerFailure``), ended, and kept as ``unhealthy`` until the scaler
        replaces it."""
        own = self._of(worker.id)
        if (
            not self._owns(worker)
            or own.reaping
            or own.start is not None  # the deadline counts from the start's end
            or worker.state is WorkerState.STOPPING
        ):
            return
        timeout = self._settings.worker_start_timeout_seconds
        await self._fail(
            worker.endpoint_id,
            f"worker {worker.id} did not call in within {timeout:g} s of its start; it was ended",
            worker.id,
        )
        self._mark(worker.id, failed_start=True)
        self.stop_worker(worker)

    async def end_with_failure(self, worker: Worker, why: str) -> None:
        """End a worker for what it did (a load-balancing worker that fails its health check,
        one over its container disk): recorded as the endpoint's worker failure, with the
        back-off of a failed start, and ended; the scaler replaces it."""
        if not self._owns(worker) or self._of(worker.id).reaping:
            return
        if worker.state is WorkerState.STOPPING:
            return
        await self._fail(worker.endpoint_id, f"worker {worker.id}: {why}; it was ended", worker.id)
        self.stop_worker(worker)

    def can_end_at_once(self, worker: Worker) -> bool:
        """Whether ``end_at_once`` could end this worker: one of this replica's processes or
        containers, not an external worker or another replica's."""
        return self._owns(worker)

    async def end_at_once(self, worker: Worker) -> bool:
        """End a worker now, with no grace (SIGKILL), before it is answered: its next lined-up
        job is no longer wanted, and the runpod SDK runs every job it queued, a SIGTERM's drain
        included (services/lineup.py). Its exit is then reported as for any stopped worker, and
        its lined-up jobs go back to the queue. False, and nothing done, for a worker this
        replica does not run (external, another replica's) or that is already being stopped."""
        own = self._of(worker.id)
        if not self._owns(worker) or own.reaping or own.start is not None:
            return False
        if worker.state is WorkerState.STOPPING:
            return False
        worker.state = WorkerState.STOPPING
        self._mark(worker.id, reaping=True)
        try:
            # Recorded first: the claim refuses a stopping worker whichever replica it polls.
            await self._workers.set_state(worker, WorkerState.STOPPING)
            self._dispatch.wake_pollers(worker.endpoint_id)
            await self.provider.stop(worker.id, 0)
        finally:
            self._mark(worker.id, reaping=False)
        return True

    def stop_worker(self, worker: Worker, for_owner: bool = False) -> None:
        """Ask a worker to stop, in the background: SIGTERM, a grace, then SIGKILL. A worker
        without a process (throttled, unhealthy) is simply dropped. ``for_owner``: stopped
        because its owner is disabled, for no fault of its jobs (``Dispatch.worker_lost``)."""
        if for_owner and self._of(worker.id).endpoint_id is not None:
            # A process of this replica's that has not exited: marked even if it is stopping
            # already (whatever else stops it, this says why), cleared when its exit is handled.
            self._mark(worker.id, for_owner=True)
        if worker.state is WorkerState.STOPPING or self._of(worker.id).reaping:
            return
        pending = worker.is_pending
        worker.state = WorkerState.STOPPING
        # Until its record says so, a later pass reading the store must not stop it again.
        self._mark(worker.id, reaping=True)
        task = asyncio.create_task(
            self._workers.remove(worker.id) if pending else self._stop(worker, for_owner)
        )
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        task.add_done_callback(lambda _task: self._mark(worker.id, reaping=False))

    async def _stop(self, worker: Worker, for_owner: bool) -> None:
        # Recorded first: the claim refuses a stopping worker whichever replica it polls.
        await self._workers.set_state(worker, WorkerState.STOPPING)
        self._dispatch.wake_pollers(worker.endpoint_id)
        self._dispatch.worker_stopping(worker.id)
        if worker.kind is WorkerKind.EXTERNAL:
            await self._dispatch.worker_lost(worker, "the worker was stopped", for_owner=for_owner)
        elif self._owns(worker):
            await self._halt(worker.id)
        # A local worker of another replica: that replica stops it (it is stopping all of its
        # workers, having lost the lead), or, if it died, the leader's sweep forgets it.

    def _owns(self, worker: Worker) -> bool:
        return worker.kind is WorkerKind.LOCAL and worker.owner == self._workers.replica_id

    async def on_exit(self, worker_id: str, code: int) -> None:
        # Its GPUs are free only now that its process is gone.
        self._gpus.release(worker_id)
        self._mark(worker_id, endpoint_id=None)
        worker = await self._workers.get(worker_id)
        if worker is None:
            return
        try:
            await self._exited(worker, code)
        finally:
            # Last: a failure recorded above quotes the worker's last lines from its log.
            await self._remove_ended(worker)

    async def _exited(self, worker: Worker, code: int) -> None:
        worker_id = worker.id
        own = self._of(worker_id)
        # Ended for missing the start-up deadline: its failure is already recorded.
        failed_start, ended, for_owner = own.failed_start, own.ending, own.for_owner
        self._mark(worker_id, failed_start=False, ending=False, for_owner=False)
        # A handler that asked for a fresh worker (refresh_worker) makes the SDK exit by itself.
        expected = not failed_start and (
            worker.state is WorkerState.STOPPING or worker.recycle or ended
        )
        quick = self._clock.now() - worker.started_at < QUICK_EXIT_SECONDS
        reason = "the worker was stopped" if expected else f"the worker was lost (exit code {code})"
        if failed_start:
            reason = "the worker did not call in by its start-up deadline"
        await self._dispatch.worker_lost(worker, reason, for_owner=for_owner)
        if expected:
            return
        unfit = self._of(worker_id).unfit
        self._mark(worker_id, unfit=False)
        if (quick or failed_start or unfit) and await self._store.get_endpoint(
            worker.endpoint_id
        ) is not None:
            if not failed_start and not unfit:
                await self._fail(
                    worker.endpoint_id,
                    f"worker {worker_id} exited with code {code} right after it started",
                    worker_id,
                    with_cause=True,
                )
            # Kept as an unhealthy record (no process) so /health and the worker list show it;
            # the scaler replaces it once the back-off has passed.
            worker.state = WorkerState.UNHEALTHY
            worker.pid = None
            worker.gpu = worker.gpu_ids = None  # released above
            await self._workers.add(worker)
        else:
            self._backoff.pop(worker.endpoint_id, None)

    async def healthy(self, endpoint_id: str, workers: list[Worker]) -> None:
        """Forget the endpoint's failed starts once one of its ``workers`` proves a start
        works: a local one started since the last failure that is up (idle or running). An
        external worker (started by hand, elsewhere) proves nothing about this server's starts,
        nor does a local one that was up before the failure: either would wipe the back-off at
        every scaler pass, and a worker failing at its start would be started again at once,
        over and over."""
        backoff = self._backoff.get(endpoint_id)
        since = backoff.last_at if backoff is not None else -math.inf
        if not any(
            w.kind is WorkerKind.LOCAL
            and w.state in (WorkerState.IDLE, WorkerState.RUNNING)
            and w.started_at >= since
            for w in workers
        ):
            return
        self._backoff.pop(endpoint_id, None)
        if endpoint_id not in self._cleared:
            await self._store.set_worker_failure(endpoint_id, None)
            self._cleared.add(endpoint_id)

    async def failure(self, endpoint_id: str) -> WorkerFailure | None:
        """The endpoint's latest failed worker start, as recorded by whichever replica saw it."""
        text = await self._store.worker_failure(endpoint_id)
        return WorkerFailure.from_json(text) if text else None

    def may_start(self, endpoint_id: str) -> bool:
        backoff = self._backoff.get(endpoint_id)
        return backoff is None or self._clock.now() >= backoff.not_before

    async def unfit(self, endpoint_id: str, worker_id: str, check: str, reason: str) -> None:
        """The worker's start-up check failed (``register_fitness_check``): the reason becomes
        the endpoint's failure now, and its exit that follows does not replace it. Only for a
        worker of that endpoint that this replica runs: the ping comes with the endpoint's
        token, which is in every one of its workers, and any id in the path, so another id (an
        outside worker, another endpoint's, one made up) must neither count a failed start nor
        leave a record here. A worker whose ping reached another replica has its failure
        recorded when it exits, with the line of its log that says why."""
        own = self._of(worker_id)
        if own.endpoint_id != endpoint_id or own.unfit:
            return
        self._mark(worker_id, unfit=True)
        what = f"its fitness check {check!r} failed" if check else "its fitness check failed"
        error = f"worker {worker_id}: {what}: {reason or 'no reason given'}"
        await self._fail(endpoint_id, error, worker_id)

    async def _fail(
        self,
        endpoint_id: str,
        error: str,
        worker_id: str | None = None,
        *,
        with_cause: bool = False,
    ) -> None:
        """Count a failed start of the endpoint's workers, and record it with the end of the
        worker's log. ``with_cause``: the error says only how the worker ended, so the last
        line of its log that says why (``exit_cause``) is added to it: the failure is what
        ``/health``, a queued job's ``/status`` and ``/v1`` show as ``placement``."""
        lines = self._logs.last_lines(endpoint_id, worker_id, LOG_LINES_SHOWN) if worker_id else []
        if with_cause and (cause := exit_cause(lines)) is not None:
            error = f"{error}: {cause}"
        earlier = self._backoff.get(endpoint_id)
        failures = (earlier.failures if earlier is not None else 0) + 1
        delay = backoff_delay(failures)
        now = self._clock.now()
        self._backoff[endpoint_id] = Backoff(failures, now, now + delay)
        self._cleared.discard(endpoint_id)
        failure = WorkerFailure(
            error=error,
            failed_starts=failures,
            at=now,
            next_start_at=now + delay,
            last_log_lines=lines,
        )
        await self._store.set_worker_failure(endpoint_id, failure.to_json())
        log.warning(
            "endpoint %s: %s (failed start %d; next try in %.0f s)",
            endpoint_id,
            error,
            failures,
            delay,
        )

    async def adopt(self) -> list[Worker]:
        """Take over the workers an earlier leader placed that still run (a provider that
        spans machines keeps them when the leader dies): recorded as this replica's, their
        GPUs held, their output and exit followed. One that no record wants (its endpoint is
        gone, or it was being stopped) is stopped instead."""
        provider = self.provider
        if not isinstance(provider, SpansMachines):
            return []
        adopted = []
        for found in await provider.found():
            record = await self._workers.get(found.worker_id)
            if (
                record is None
                or record.kind is not WorkerKind.LOCAL
                or record.state is WorkerState.STOPPING
            ):
                await provider.stop(found.worker_id, 0)
                continue
            fields: dict[str, object] = {"owner": self._workers.replica_id, "pid": found.pid}
            if found.gpu_type is not None and found.gpu_count:
                held = self._gpus.hold(found.worker_id, found.node, found.gpu_type, found.gpu_count)
                if held is None:
                    # Its GPUs are not in the inventory as free: kept, it would hold GPUs the
                    # pool gives out again. Ended; the scaler starts another where there is room.
                    log.warning(
                        "worker %s holds %d x %s the inventory does not show free: ended",
                        found.worker_id,
                        found.gpu_count,
                        found.gpu_type,
                    )
                    await provider.stop(found.worker_id, 0)
                    await self._dispatch.worker_lost(record, "its GPUs could not be accounted for")
                    continue
                fields |= {
                    "gpu": found.gpu_type,
                    "gpu_ids": ",".join(str(g.index) for g in held),
                }
            if found.served is not None:
                fields |= {
                    "address": found.served.address,
                    "health_address": found.served.health_address,
                }
            await self._workers.update(record, **fields)
            self._mark(found.worker_id, endpoint_id=found.endpoint_id)
            await provider.take_over(found.worker_id)
            adopted.append(record)
        if adopted:
            log.info(
                "took over %d worker(s) an earlier leader placed: %s",
                len(adopted),
                ", ".join(w.id for w in adopted),
            )
        return adopted

    async def sweep_dead(
        self, alive: Callable[[set[str]], Awaitable[set[str]]], same_host: bool
    ) -> list[Worker]:
        """Local workers whose owner replica is gone (an earlier run of this server, or a
        replica that died): their jobs go back to the queue and their records go. Their
        processes died with their replica (the shim's parent-death signal); ``same_host``
        (one machine, one replica) also ends any that survived, by pid."""
        me = self._workers.replica_id
        workers = [
            w for w in await self._workers.all() if w.kind is WorkerKind.LOCAL and w.owner != me
        ]
        owners = {w.owner for w in workers if w.owner is not None}
        live = await alive(owners) if owners else set()
        dead = [w for w in workers if w.owner not in live]
        for worker in dead:
            if same_host and worker.pid is not None:
                self.provider.kill_leftover(worker.id, worker.pid)
            elif isinstance(self.provider, SpansMachines):
                # A cluster's actor is found by the worker's id, with or without a pid (one
                # still being placed has none).
                self.provider.kill_leftover(worker.id, worker.pid or 0)
            await self._dispatch.worker_lost(
                worker, "the replica that ran the worker is gone", unseen_since=True
            )
            if same_host:
                # Its home went with nothing: a crashed server's workers' homes would stay on
                # the disk, over the next worker's budget (services/disk_watch.py).
                await self._remove_ended(worker)
        return dead

    async def forget_stale_own(self, leading: bool) -> list[Worker]:
        """Records of this replica's local workers that no process backs any more: their exit
        could not be recorded (the database was out of reach then), or this replica stopped
        leading and its throttled or unhealthy records are no longer wanted. Their jobs go back
        to the queue and the records go, so that no phantom worker counts against
        ``workersMax``."""
        running = set(self.provider.running())
        stale = [
            w
            for w in await self._workers.all()
            if self._owns(w)
            and w.id not in running
            and self._of(w.id).endpoint_id is None
            and not self._of(w.id).reaping
            and not (leading and w.is_pending)
        ]
        for worker in stale:
            await self._dispatch.worker_lost(
                worker, "the worker's process is gone", unseen_since=True
            )
            await self._remove_ended(worker)
        return stale

    async def _remove_ended(self, worker: Worker) -> None:
        """An ended worker's home is its container disk, and goes with it as a container's
        writable layer goes with the container: the next worker starts with a fresh one. Kept
        until the endpoint went, the homes of workers started and ended over and over (a
        tenant's, on purpose or not) would fill the disk the database is on. Its log stays,
        with those of its user's other ended workers, on every endpoint of theirs, up to
        ``log_ended_max_bytes``: a budget per endpoint would be one a tenant multiplies by
        making endpoints. A link the worker may have put in its place is not followed, and a
        tree of any depth goes (``tenant_trees.remove_tree``)."""
        await asyncio.to_thread(remove_tree, self.homes(worker.endpoint_id) / worker.id)
        # A deleted endpoint's logs go with it; its last workers' meanwhile count alone, as do
        # a worker's whose user the store cannot tell now (the next end prunes the rest).
        endpoint_ids = [worker.endpoint_id]
        try:
            endpoint = await self._store.get_endpoint(worker.endpoint_id)
            if endpoint is not None:
                endpoint_ids = [e.id for e in await self._store.list_endpoints(endpoint.userId)]
        except Exception:
            log.exception("the endpoints of worker %s's user could not be read", worker.id)
        await asyncio.to_thread(
            self._logs.prune_ended,
            endpoint_ids,
            set(self.provider.running()),
            self._settings.log_ended_max_bytes,
            self._settings.log_ended_max_workers,
        )

    async def reap_orphans(self) -> None:
        """Stop this replica's processes whose record says they should not run: the endpoint
        was deleted, or the worker was told to stop, through another replica."""
        for worker_id in self.provider.running():
            if self._of(worker_id).reaping:
                continue
            record = await self._workers.get(worker_id)
            if record is not None and record.state is not WorkerState.STOPPING:
                continue
            self._mark(worker_id, reaping=True)
            task = asyncio.create_task(self._reap(worker_id, record is None))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def _reap(self, worker_id: str, forgotten: bool) -> None:
        try:
            await self._halt(worker_id)
            endpoint_id = self._of(worker_id).endpoint_id
            gone = endpoint_id is not None and await self._store.get_endpoint(endpoint_id) is None
            if forgotten and gone and endpoint_id is not None:
                await self.remove_files(endpoint_id)
        finally:
            self._mark(worker_id, reaping=False)

    async def remove_endpoint_workers(self, endpoint_id: str, workers: list[Worker]) -> None:
        """Stop the workers of an endpoint being deleted. This replica's own are waited for;
        another replica's are forgotten here and stopped by their owner (``reap_orphans``)."""
        own = [w for w in workers if self._owns(w)]
        # Stopped here, so the scaler's orphan sweep must leave them alone meanwhile.
        for worker in own:
            self._mark(worker.id, reaping=True)
        try:
            for worker in own:
                await self._workers.set_state(worker, WorkerState.STOPPING)
            await asyncio.gather(*(self._halt(w.id) for w in own))
        finally:
            for worker in own:
                self._mark(worker.id, reaping=False)
        for worker in workers:
            await self._workers.remove(worker.id)
        self._backoff.pop(endpoint_id, None)
        self._said.pop(endpoint_id, None)

    async def remove_files(self, endpoint_id: str) -> None:
        """A deleted endpoint's workers' logs and homes, off the event loop: a tenant's tree
        of any size takes as long as it takes."""
        await asyncio.to_thread(self._logs.remove, endpoint_id)
        await asyncio.to_thread(remove_tree, self.homes(endpoint_id))

    async def remove_files_of_deleted(self) -> list[str]:
        """Logs and homes on this host of endpoints that are gone: a delete that a crash cut
        between its record and its files (``Endpoints.delete``) leaves them, and nothing else
        would ever remove them. Run as a replica begins leading; an endpoint is made before
        any of its files, so none of a live one can be taken for a deleted one."""
        on_disk = await asyncio.to_thread(
            lambda: self._logs.endpoints() | folders(self.homes_root())
        )
        if not on_disk:
            return []
        known = {e.id for e in await self._store.list_endpoints(None)}
        gone = sorted(e for e in on_disk - known if made_by_short_id(e))
        for endpoint_id in gone:
            log.info("removing the files of endpoint %s, deleted before they were", endpoint_id)
            await self.remove_files(endpoint_id)
        return gone

    async def _end_all(self) -> None:
        """Stop every worker process of this replica, as asked: not counted as failed starts."""
        starting = [worker_id for worker_id, own in self._own.items() if own.start is not None]
        for worker_id in {*self.provider.running(), *starting}:
            self._mark(worker_id, ending=True)
        await asyncio.gather(*(self._halt(w) for w in starting))
        await self.provider.stop_all(self._settings.worker_stop_grace_seconds)

    async def abandon(self) -> None:
        """This replica stopped leading: end its workers (their jobs go back to the queue)
        so that the next leader alone decides how many run."""
        await self._end_all()
        self._backoff.clear()
        self._cleared.clear()

    async def shutdown(self) -> None:
        await self._end_all()
        if self._stopping:
            await asyncio.wait(set(self._stopping), timeout=10)


def container_spec(
    endpoint: Endpoint,
    template: Template,
    worker: Worker,
    credentials: RegistryCredentials | None,
) -> ContainerSpec:
    """The worker as a container: the template's image and command, the worker's GPUs, and a
    CPU endpoint's vCPUs and memory."""
    limits = cpu_limits(endpoint.spec)
    return ContainerSpec(
        image=template.imageName,
        entrypoint=list(template.dockerEntrypoint),
        command=list(template.dockerStartCmd),
        credentials=credentials,
        gpu_indices=tuple(int(i) for i in worker.gpu_ids.split(",")) if worker.gpu_ids else (),
        vcpus=limits.vcpus if limits else None,
        memory_bytes=limits.memory_bytes if limits else None,
        disk_gb=template.containerDiskInGb or None,
    )
