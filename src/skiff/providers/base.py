"""The boundary between deciding that a worker should run and making it run somewhere."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from skiff.domain.gpus import Gpu
from skiff.domain.pod_sessions import EntryRequest, TerminalSize
from skiff.domain.pods import PodSpec

#: Called with (worker id, exit code) when a worker's process ends, whoever ended it.
ExitCallback = Callable[[str, int], Awaitable[None]]


#: Where a worker sees its endpoint's network volume, as on the hosted platform.
VOLUME_MOUNT_PATH = "/runpod-volume"


#: The address a load-balancing worker's ports are reached on: this host's loopback, so that
#: nothing but skiff's own proxy (which checks the caller's key) reaches a container's ports.
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class ServedPorts:
    """A load-balancing worker's own ports, as it listens inside its process or container: its
    HTTP server (``PORT``) and its ``GET /ping`` (``PORT_HEALTH``, often the same port)."""

    port: int
    health_port: int


@dataclass(frozen=True, slots=True)
class ServedAt:
    """Where this host reaches a started load-balancing worker's ports (``host:port``)."""

    address: str
    health_address: str


@dataclass(frozen=True, slots=True)
class Launch:
    worker_id: str
    endpoint_id: str
    argv: list[str]
    env: dict[str, str]
    home: Path
    #: The directory of the endpoint's network volume, to be mounted read-write at
    #: ``VOLUME_MOUNT_PATH`` inside the worker; None when it has none.
    volume: Path | None = None
    #: Where ``volume`` shows inside: ``VOLUME_MOUNT_PATH`` for a worker, the mount path of a
    #: pod run as a process (``local_pods.py``).
    volume_mount: str = VOLUME_MOUNT_PATH
    #: The process's working directory (a process pod's home); None: the provider's own.
    cwd: Path | None = None
    #: What a container provider runs (``providers/docker.py``); a process provider ignores it.
    container: ContainerSpec | None = None
    #: A load-balancing endpoint's worker: the ports it serves on, to be reachable from this
    #: host (``served_at``); None for a queue worker, which calls in instead.
    serves: ServedPorts | None = None
    #: In the sandbox, the TCP ports it may bind besides ``serves`` and one the kernel picks
    #: (``port_fence.py``): a pod's declared ports.
    binds: tuple[int, ...] = ()
    #: The GPUs it was given (all of one type, on one machine): where a provider that places
    #: workers across machines puts it. Empty for a CPU worker.
    gpus: tuple[Gpu, ...] = ()
    #: A CPU endpoint's vCPUs (``domain/containers.py``), reserved where the provider can;
    #: None: no reservation.
    vcpus: int | None = None
    #: A CPU endpoint's memory, its cap where the provider sets one (``cgroups.py``); None:
    #: no cap.
    memory_bytes: int | None = None
    #: Run in the sandbox that keeps a tenant's code from the server's and other tenants'
    #: files and processes (``providers/bubblewrap.py``). False only for an administrator's
    #: worker on a host that cannot make one (``sandbox_problem``).
    sandboxed: bool = True
    #: The directory holding the homes of all the endpoint's workers (``home`` is in it): what
    #: the sandbox of the endpoint's fork server makes writable, so that a worker forked from
    #: it later finds its own home there (``fork_server.py``). None: never forked in a sandbox.
    homes: Path | None = None
    #: In the sandbox, a second place its home is seen at: a pod's ``/root``, where the hosted
    #: platform's pods keep theirs (the runpod CLI copies files there). None: only ``home``.
    home_also_at: str | None = None
    #: In the sandbox, host files shown read-only at these paths (a session's
    #: ``/etc/rp_environment``: ``bubblewrap.Sandbox.command``).
    files: Mapping[str, Path] = field(default_factory=dict)
    #: In the sandbox, what of the host it must see besides what ``argv`` names; and whether
    #: ``argv`` names files at all (a session's command line does not: it sees what its pod's
    #: own command does, given as ``reach``).
    reach: tuple[str, ...] = ()
    argv_needed: bool = True
    #: The user whose worker (or pod) it is: whose output pace its log shares (``LogSinks``).
    user_id: str | None = None


@dataclass(frozen=True, slots=True)
class RegistryCredentials:
    """A template's container registry auth. The password never shows in a repr or a log."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """A worker as a container: the template's image and command (the image's own where the
    template gives none), and the endpoint's share of the machine."""

    image: str
    entrypoint: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    credentials: RegistryCredentials | None = None
    #: Host indices of exactly the GPUs the worker is given (a device request for them).
    gpu_indices: tuple[int, ...] = ()
    #: CPU endpoints: vCPUs and memory (``domain/containers.py``); None: no limit.
    vcpus: int | None = None
    memory_bytes: int | None = None
    #: The template's ``containerDiskInGb``: a size limit on the container's writable layer
    #: where the storage driver supports one.
    disk_gb: int | None = None


class WorkerStartError(Exception):
    """The worker could not be started, for a reason worth showing the endpoint's owner as is
    (``lastWorkerFailure``): a missing image, refused credentials, an unreachable registry."""


class LogSink(Protocol):
    """Where a worker's output goes. A provider feeds it the bytes as they come (stdout and
    stderr as one stream, cut anywhere); the logs service (``services/logs.py``) owns the rest:
    lines, stamps, caps and rotation, and where the log lives, so every provider's workers log
    alike."""

    def feed(self, data: bytes) -> float:
        """Keep ``data``. A log that cannot be written is turned off rather than raise: the
        worker's output must keep flowing. The seconds the provider waits before it reads more
        of this output (0: go on), so that a worker printing faster than its log's pace
        (``SKIFF_LOG_BYTES_PER_SECOND``) waits in its own writes, not the server's CPU."""
        ...

    def close(self) -> None:
        """The output ended: keep its last, unfinished line too."""
        ...


class LogSinks(Protocol):
    """Opens the log of (endpoint id, worker id) for a worker about to start (a pod's: its id
    twice). ``user_id``: whose it is, so that all of a user's output on this server shares one
    pace (``SKIFF_LOG_USER_BYTES_PER_SECOND``); None where the provider cannot tell (a worker
    found again on a Ray node, where only the administrator's run), which keeps only the log's
    own pace. A container pod says whose it is in a label, read when it is followed again."""

    def __call__(self, endpoint_id: str, worker_id: str, user_id: str | None = None) -> LogSink: ...


class WorkerProvider(Protocol):
    async def start(self, launch: Launch) -> int:
        """Start the worker; returns its process id."""
        ...

    async def stop(self, worker_id: str, grace: float) -> None:
        """Ask it to stop (SIGTERM), then end it (SIGKILL) after ``grace`` seconds."""
        ...

    async def stop_all(self, grace: float) -> None: ...

    def running(self) -> list[str]: ...

    def worker_url(self, base_url: str) -> str:
        """The server's ``base_url`` as the worker can reach it (a container sees the host
        through its gateway, not as 127.0.0.1)."""
        ...

    def host_environment(self) -> dict[str, str]:
        """What the worker inherits from the server's own environment, below the template's
        and the protocol's variables: the host's for a process, nothing for a container."""
        ...

    #: Whether the worker runs a template's image (so a template without a command still
    #: runs, with the image's own).
    runs_images: bool

    #: Whether a start may take minutes (pulling an image): the fleet then starts its workers
    #: in the background, so that one slow pull holds up no other endpoint, and counts the
    #: start-up deadline from when ``start`` returned.
    slow_starts: bool

    async def volume_mount_problem(self) -> str | None:
        """None when this provider can mount a network volume (``Launch.volume``) at
        ``VOLUME_MOUNT_PATH`` in its workers; otherwise why not, in words for the user who asked
        for one (an endpoint with a ``networkVolumeId`` is refused with them)."""
        ...

    async def sandbox_problem(self) -> str | None:
        """None when every worker this provider runs is kept apart from the server's and other
        tenants' files and processes (a sandbox that works, a container), or when the operator
        turned that off (``SKIFF_SANDBOX=off``); otherwise why not, in words for a user: then
        only the administrator's workers start, with ``Launch.sandboxed`` False."""
        ...

    def kill_leftover(self, worker_id: str, pid: int) -> bool:
        """End a worker left running by an earlier server process, if it is still there."""
        ...

    def served_at(self, worker_id: str) -> ServedAt | None:
        """Where this host reaches a started worker's ``Launch.serves`` ports; None for a
        worker that serves none or is not running."""
        ...


@dataclass(frozen=True, slots=True)
class FoundWorker:
    """A worker an earlier leader placed that still runs (``SpansMachines.found``)."""

    worker_id: str
    endpoint_id: str
    pid: int | None
    node: str
    gpu_type: str | None
    gpu_count: int
    served: ServedAt | None


@runtime_checkable
class SpansMachines(Protocol):
    """A worker provider that places workers across a cluster of machines (``providers/ray.py``)
    rather than on this host: its GPUs are the cluster's, read again as machines come and go,
    and its workers outlive the replica that placed them, to be taken over by the next leader."""

    async def gpu_inventory(self) -> list[Gpu]:
        """Every GPU of the machines in the cluster now, each with its machine (``Gpu.node``)."""
        ...

    async def worker_limit(self) -> int:
        """How many workers the cluster can hold (``providers/capacity.py``'s rule over all of
        its CPUs and memory), for ``SKIFF_MAX_WORKERS`` left unset."""
        ...

    async def found(self) -> list[FoundWorker]:
        """Workers running in the cluster that this replica did not start (an earlier leader
        did): not yet followed. Each is then taken over (``take_over``) or stopped."""
        ...

    async def take_over(self, worker_id: str) -> None:
        """Follow a found worker as if this replica had started it: its output into its log,
        its exit reported."""
        ...

    async def unreachable(self, url: str) -> list[str]:
        """The machines that cannot reach ``url`` (the server, as workers call it), each with
        why; empty when every one can."""
        ...


@runtime_checkable
class WritesLayers(Protocol):
    """A provider whose workers or pods are containers, each writing to a layer of its own
    that its storage driver may not bound (``containerDiskInGb`` applied only where it can):
    the disk watch measures those layers as it measures a process's home."""

    async def layer_bytes(self) -> dict[str, int]:
        """What each running container of this replica has written to its own layer, in bytes,
        by worker id (a pod provider's: by pod id); none when the daemon cannot say."""
        ...


async def layer_bytes_of(provider: object) -> dict[str, int]:
    """``provider``'s containers' layers (``WritesLayers``); none for processes, whose homes
    are measured instead."""
    return await provider.layer_bytes() if isinstance(provider, WritesLayers) else {}


# -- pods -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodLaunch:
    """A pod's instance to start: its image and command, what it is given of the machine,
    and its volume. ``version`` and ``restarts`` are the pod's, written on the instance so a
    restarted server can tell whether one it finds is still the one wanted."""

    pod_id: str
    version: int
    image: str
    entrypoint: list[str]
    command: list[str]
    env: dict[str, str]
    #: ``"8888/http"``, ``"22/tcp"``: published on host ports the start reports.
    ports: tuple[str, ...]
    #: The host directory mounted read-write at ``mount_path`` (the pod volume, or the network
    #: volume that replaces it); None: nothing is mounted.
    volume: Path | None
    mount_path: str
    #: The pod's own scratch directory on the host (a process pod's home and working
    #: directory); wiped when the instance starts fresh.
    home: Path
    gpu_indices: tuple[int, ...] = ()
    vcpus: int | None = None
    memory_bytes: int | None = None
    disk_gb: int | None = None
    credentials: RegistryCredentials | None = None
    #: The GPUs it was given, with their machine (where a provider that spans machines puts
    #: it); ``gpu_indices`` are theirs.
    gpus: tuple[Gpu, ...] = ()
    #: In the sandbox, as ``Launch.sandboxed``.
    sandboxed: bool = True
    #: As ``Launch.user_id``.
    user_id: str | None = None


@dataclass(frozen=True, slots=True)
class PodInstance:
    """A running instance of a pod: which version of it, and the host port of each of its
    ports."""

    pod_id: str
    version: int
    port_mappings: dict[str, int]
    #: Where its ports are reached, for an instance on another machine (a Ray node's
    #: address); None: the server's public host.
    host: str | None = None
    #: The machine holding its GPUs (``Gpu.node``), for a provider that spans machines.
    node: str = ""


#: Called with (pod id, exit code) when a pod's instance ends by itself (not when stopped).
PodExitCallback = Callable[[str, int], Awaitable[None]]


class PodProvider(Protocol):
    """Runs pods' instances. A stop ends the instance and drops its disk (as on the hosted
    platform, only the volume outlives a stop); ``restart`` keeps it."""

    async def start(self, launch: PodLaunch) -> PodInstance:
        """A fresh instance; ``WorkerStartError`` (or ``OSError``) saying why it could not."""
        ...

    async def restart(self, pod_id: str, grace: float) -> PodInstance | None:
        """Stop and start the instance in place (its disk kept); None when none runs."""
        ...

    async def stop(self, pod_id: str, grace: float) -> None:
        """SIGTERM, ``grace`` seconds, SIGKILL; then the instance is removed."""
        ...

    def running(self) -> list[PodInstance]: ...

    async def enter(self, pod_id: str, request: EntryRequest) -> PodEntry:
        """A process started inside the running pod for a session (``pod_entry.py``), ended
        with the pod; ``EntryRefused`` saying why there is none."""
        ...

    def command_problem(self, spec: PodSpec) -> str | None:
        """Why the pod's command cannot run here, checked when a pod is created or its
        command changes (refused then, rather than started again and
        again); None when it can, or when only its start can tell."""
        ...

    def ports_problem(self, spec: PodSpec) -> str | None:
        """Why the pod's declared ports can never be served here (this host keeps them for
        others), checked when a pod is created or its ports change; None when they can, or
        when only its start can tell (another pod serves one now)."""
        ...

    async def sandbox_problem(self) -> str | None:
        """As ``WorkerProvider.sandbox_problem``: None when pods are kept apart (or the sandbox
        is off); otherwise why not, and only the administrator's pods start."""
        ...

    async def adopt(self) -> list[PodInstance]:
        """Instances an earlier run of this server left running, taken over (their output
        followed again, their exit watched); a provider whose instances die with the server
        finds none."""
        ...

    async def close(self) -> None:
        """The server stops: pods that outlive it (containers) are left running, to be
        adopted by the next run; those that cannot (processes) are stopped."""
        ...


class EntryRefused(Exception):
    """A pod cannot be entered now (it does not run here, its provider cannot): the words are
    for the user."""


class PodEntry(Protocol):
    """A process running inside a pod for a session: bytes in and out."""

    async def read_output(self) -> bytes:
        """The next of its output (its terminal's, with one); ``b""`` once it has ended."""
        ...

    async def read_errors(self) -> bytes:
        """The next of its error output; ``b""`` once it has ended (at once on a terminal,
        whose output holds its errors)."""
        ...

    async def write(self, data: bytes) -> None:
        """To its input (what is typed, on a terminal)."""
        ...

    def close_input(self) -> None:
        """Its input ends (the client sent EOF); a terminal is sent its EOF character."""
        ...

    def resize(self, size: TerminalSize) -> None:
        """Its terminal is now this size (nothing without one)."""
        ...

    async def wait(self) -> int:
        """Its exit code once it has ended: 128 + the signal's number when killed by one."""
        ...

    def end(self) -> None:
        """Kill it and whatever it started (the session is over)."""
        ...
