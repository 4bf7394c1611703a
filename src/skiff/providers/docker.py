"""Workers as containers of their template's image, through the Docker Engine API.

The ``docker`` package talks to the daemon ``DOCKER_HOST`` names (the local socket by default;
Podman's compatible socket works the same way); nothing shells out to the ``docker`` command.
Its calls block, so each runs in a thread (``asyncio.to_thread``; a start, which may pull for
minutes, in a daemon thread of its own): the server's loop never waits on the daemon.

A worker's container:

- runs the template's image, pulled with the template's registry credentials when it has them
  (every start, so the credentials are checked and a private image is never served from a copy
  another user pulled), else only when the image is not here yet. Pull progress goes into the
  worker's log; a failed pull raises ``WorkerStartError`` saying which: a missing image,
  refused credentials, or an unreachable registry.
- gets the worker protocol's environment and nothing of the server's own (``host_environment``),
  reaches the server through the host gateway (``host.docker.internal``) unless
  ``SKIFF_PUBLIC_URL`` names the address, and sees exactly its GPUs through a device request
  (the NVIDIA container toolkit), renumbered from 0 inside.
- cannot gain privileges (``no-new-privileges``: a setuid ``sudo`` gains nothing) and holds at
  most ``SKIFF_CONTAINER_PIDS_LIMIT`` processes and threads, so one tenant's fork bomb stops
  at its container (``run_options``, which pods' containers share).
- carries labels naming the worker, endpoint and owner replica, the server it belongs to
  (``server_identity``: this host and data directory, the same across restarts while the
  replica id is new each time) and skiff's own marker: only containers with the marker are
  ever listed, stopped or removed (``kill_leftover`` and ``end_leftovers`` look them up by
  label), so a container of anybody else is never touched.
- is removed once it has ended and its exit code has been reported to ``on_exit``.

``containerDiskInGb`` becomes a ``size`` storage option, which only some storage drivers honour
(overlay2 on XFS with project quotas, btrfs, zfs, devicemapper); on others (overlay2 on ext4,
the usual case) the container is created without that limit and the worker's log says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import docker  # type: ignore[import-untyped]
from attrs import define, field, setters
from docker.errors import APIError, DockerException, ImageNotFound, NotFound  # type: ignore[import-untyped]
from docker.types import DeviceRequest  # type: ignore[import-untyped]

from skiff.domain.containers import DEFAULT_PIDS_LIMIT, visible_devices_inside
from skiff.providers.base import (
    LOOPBACK,
    VOLUME_MOUNT_PATH,
    ContainerSpec,
    ExitCallback,
    Launch,
    LogSink,
    LogSinks,
    PodLaunch,
    RegistryCredentials,
    ServedAt,
    ServedPorts,
    WorkerStartError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Every container skiff starts carries this label; nothing without it is ever touched.
MARKER = "dev.skiff.worker"
#: A pod container's marker (``docker_pods.py``): a worker's container says it is none.
POD_MARKER = "dev.skiff.pod"
WORKER_LABEL = "dev.skiff.worker-id"
ENDPOINT_LABEL = "dev.skiff.endpoint-id"
OWNER_LABEL = "dev.skiff.owner"
SERVER_LABEL = "dev.skiff.server"
#: Docker's security option that keeps every process of a container from gaining privileges.
NO_NEW_PRIVILEGES = "no-new-privileges:true"
#: The name a container reaches its host by (Docker's ``host-gateway``).
HOST_GATEWAY = "host.docker.internal"
#: The bridge network every container skiff starts is on: one where containers cannot reach
#: each other (``enable_icc`` off), so one tenant's container cannot call another's ports. On
#: Docker's default bridge every container reaches every other.
NETWORK = "skiff-tenants"
NETWORK_OPTIONS = {"com.docker.network.bridge.enable_icc": "false"}
#: How long a start waits for another process of this host to make the tenant network.
_HOST_LOCK_WAIT_SECONDS = 30.0
#: Hosts that mean "this machine" to the server but the container itself inside it.
_LOOPBACK = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "::", ""}
_DRAIN_SECONDS = 2.0


def labels(worker_id: str, endpoint_id: str, owner: str, server: str) -> dict[str, str]:
    """A worker container's labels. Docker adds the image's own ``LABEL``s to a container's,
    and a tenant writes its image: every skiff label the other kind of container is told by
    is set here too, empty, so no image can make a worker's container pass for a pod (whose
    owner's terminal and ports would then lead into it)."""
    return {
        POD_MARKER: "",
        MARKER: "1",
        WORKER_LABEL: worker_id,
        ENDPOINT_LABEL: endpoint_id,
        OWNER_LABEL: owner,
        SERVER_LABEL: server,
    }


def server_identity(hostname: str, data_dir: Path) -> str:
    """The server a container belongs to, the same across its restarts: one live server per
    data directory (``serve_lock.py``), and the host's name, so that two machines sharing a
    daemon (``DOCKER_HOST``) with the same data directory path are told apart. Hashed: a
    label need not show the path."""
    named = f"{hostname}\0{data_dir.resolve()}".encode()
    return hashlib.sha256(named).hexdigest()[:16]


def is_ours(container_labels: dict[str, str] | None) -> bool:
    """Only containers skiff made carry its marker and a worker id."""
    found = container_labels or {}
    return found.get(MARKER) == "1" and bool(found.get(WORKER_LABEL))


def gateway_url(base_url: str) -> str:
    """The server's URL as a container sees it: a loopback host becomes the host gateway."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if host not in _LOOPBACK:
        return base_url
    netloc = HOST_GATEWAY + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def split_reference(image: str) -> tuple[str, str]:
    """``repo[:tag|@digest]`` as (repository, tag or digest), ``latest`` when it names none."""
    if "@" in image:
        repo, digest = image.split("@", 1)
        return repo, digest
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = image.rsplit(":", 1)
        return repo, tag
    return image, "latest"


_MISSING = re.compile(r"manifest unknown|not found|does not exist|no such image", re.I)
_REFUSED = re.compile(r"unauthorized|authentication required|denied|no basic auth", re.I)
_UNREACHABLE = re.compile(
    r"connection refused|no such host|dial tcp|timeout|i/o timeout|unreachable|EOF", re.I
)


def pull_failure(image: str, message: str) -> str:
    """What a failed pull means to the endpoint's owner, from the daemon's message."""
    if _REFUSED.search(message):
        why = "the registry refused the credentials (wrong or missing registry auth)"
    elif _MISSING.search(message):
        why = "the image does not exist in the registry"
    elif _UNREACHABLE.search(message):
        why = "the registry could not be reached"
    else:
        why = "the pull failed"
    return f"image {image} could not be pulled: {why}: {message.strip()}"


def container_environment(launch: Launch) -> dict[str, str]:
    """The worker's environment inside its container: the host path of its home means nothing
    there (the image's own ``HOME`` stays). ``run_options`` adds its GPUs'."""
    env = dict(launch.env)
    if env.get("HOME") == str(launch.home.resolve()):
        del env["HOME"]
    return env


def create_options(
    launch: Launch,
    spec: ContainerSpec,
    owner: str,
    server: str,
    pids_limit: int = DEFAULT_PIDS_LIMIT,
) -> dict[str, Any]:
    """The arguments of ``containers.create`` for a worker (pure, so tests can read them)."""
    options = run_options(spec, container_environment(launch), pids_limit=pids_limit)
    options |= {
        "labels": labels(launch.worker_id, launch.endpoint_id, owner, server),
        "name": f"skiff-{launch.worker_id}",
    }
    if launch.volume is not None:
        # Absolute, as a pod's (docker_pods.py): a relative source is a named volume's name.
        source = str(launch.volume.resolve())
        options["volumes"] = {source: {"bind": VOLUME_MOUNT_PATH, "mode": "rw"}}
    if launch.serves is not None:
        # A load-balancing worker's ports, each on a host port Docker picks, on the loopback
        # only: callers reach it through skiff's proxy, which checks their key.
        ports = {launch.serves.port, launch.serves.health_port}
        options["ports"] = {f"{port}/tcp": (LOOPBACK, None) for port in sorted(ports)}
    return options


def served_at(container_attrs: dict[str, Any], serves: ServedPorts) -> ServedAt | None:
    """Where this host reaches a started worker container's served ports."""
    port = published_port(container_attrs, serves.port)
    health = published_port(container_attrs, serves.health_port)
    if port is None or health is None:
        return None
    return ServedAt(f"{LOOPBACK}:{port}", f"{LOOPBACK}:{health}")


def published_port(container_attrs: dict[str, Any], port: int) -> int | None:
    """The host port Docker published a container's ``port`` (TCP) on, from a started
    container's ``NetworkSettings``; None while it is not published."""
    published = (container_attrs.get("NetworkSettings") or {}).get("Ports") or {}
    for binding in published.get(f"{port}/tcp") or []:
        host_port = binding.get("HostPort")
        if host_port:
            return int(host_port)
    return None


def run_options(
    runs: ContainerSpec | PodLaunch, env: Mapping[str, str], *, pids_limit: int
) -> dict[str, Any]:
    """What a worker's container and a pod's share of ``containers.create``'s arguments: a
    detached container of ``runs.image`` that reaches the host, runs its entrypoint/command
    (the image's own where empty) with ``env``, and gets exactly its GPUs (numbered from 0
    inside) and its CPU and memory limits, at most ``pids_limit`` processes and threads (0:
    none set here), and no way to gain privileges."""
    environment = dict(env)
    if runs.gpu_indices:
        environment["CUDA_VISIBLE_DEVICES"] = visible_devices_inside(len(runs.gpu_indices))
        environment["NVIDIA_VISIBLE_DEVICES"] = ",".join(str(i) for i in runs.gpu_indices)
    options: dict[str, Any] = {
        "image": runs.image,
        "environment": environment,
        "extra_hosts": {HOST_GATEWAY: "host-gateway"},
        "detach": True,
        "stdin_open": False,
        "tty": False,
        # A setuid program (sudo, su, ping) or a file capability raises no process's privileges
        # inside: the tenant's code keeps the ones the container started with.
        "security_opt": [NO_NEW_PRIVILEGES],
    }
    if pids_limit:
        # Leaving it out (0) leaves the daemon's own default-pids-limit to apply.
        options["pids_limit"] = pids_limit
    if runs.entrypoint:
        options["entrypoint"] = runs.entrypoint
    if runs.command:
        options["command"] = runs.command
    if runs.gpu_indices:
        options["device_requests"] = [
            DeviceRequest(
                driver="nvidia",
                device_ids=[str(i) for i in runs.gpu_indices],
                capabilities=[["gpu"]],
            )
        ]
    if runs.vcpus is not None:
        options["nano_cpus"] = runs.vcpus * 1_000_000_000
    if runs.memory_bytes is not None:
        options["mem_limit"] = runs.memory_bytes
    return options


#: Where a pull with credentials leaves its mark: a tag ``skiff-credentialed/<hash of the
#: repository>:pulled``. A repository so marked is private to whoever can pull it: a template
#: without credentials naming any reference into it (a tag, a digest) runs it only after a
#: pull without credentials succeeds.
CREDENTIALED_MARK = "skiff-credentialed"


def ensure_image(
    client: Any,
    image: str,
    credentials: RegistryCredentials | None,
    sink: LogSink,
    given_up: Callable[[], bool],
) -> None:
    """Pull ``image`` unless a copy here may serve it; its progress goes into ``sink``.
    ``WorkerStartError`` saying why a pull failed, or that ``given_up()`` turned true
    meanwhile (checked at each of the pull's events).

    With credentials it is always pulled, so that they are checked. Without, a copy here serves
    only when it bears the name asked for (Docker also finds an image by a prefix of its id,
    so ``6`` could name any image on the daemon) and its repository was never pulled with
    someone's credentials (``CREDENTIALED_MARK``): else it is pulled without credentials, which
    a private image's registry refuses. Every tenant's images share one daemon, so a copy
    another user pulled must not open a private image to anyone who names it."""
    if credentials is None:
        try:
            local = client.images.get(image)
            if bears_name(local, image) and not _credentialed(client, image):
                return
        except ImageNotFound:
            pass
        except DockerException as exc:
            raise WorkerStartError(f"the Docker daemon failed: {_explain(exc)}") from exc
    auth = None
    if credentials is not None:
        auth = {"username": credentials.username, "password": credentials.password}
    _pull(client, image, auth, Pulling(sink, given_up))
    if credentials is not None:
        _mark_credentialed(client, image)


@dataclass(frozen=True, slots=True)
class Pulling:
    """Where a pull's progress goes, and whether its start was given up meanwhile."""

    sink: LogSink
    given_up: Callable[[], bool]


def bears_name(local: Any, image: str) -> bool:
    """Whether the copy ``local`` that Docker found for ``image`` bears that name (a tag, or a
    digest it was pulled by), rather than being found by a prefix of its id."""
    attrs = getattr(local, "attrs", None) or {}
    names = [*(getattr(local, "tags", None) or []), *(attrs.get("RepoDigests") or [])]
    return normal_reference(image) in {normal_reference(name) for name in names}


def repository_of(reference: str) -> str:
    """The repository a reference names, without its tag or digest (``host:5000/a/b``)."""
    name = normal_reference(reference).partition("@")[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.partition(':')[0]}" if head else last.partition(":")[0]


def _credential_mark(image: str) -> str:
    digest = hashlib.sha256(repository_of(image).encode()).hexdigest()[:24]
    return f"{CREDENTIALED_MARK}/{digest}"


def _credentialed(client: Any, image: str) -> bool:
    try:
        client.images.get(f"{_credential_mark(image)}:pulled")
    except ImageNotFound:
        return False
    return True


def normal_reference(reference: str) -> str:
    """A reference as Docker lists it: ``:latest`` where no tag or digest is given, and Docker
    Hub's ``docker.io/`` and ``library/`` left out (``ubuntu`` is ``ubuntu:latest``)."""
    name, at, digest = reference.partition("@")
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    for prefix in ("docker.io/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if name.startswith("library/") and name.count("/") == 1:
        name = name[len("library/") :]
    return name + at + digest


def _mark_credentialed(client: Any, image: str) -> None:
    """Mark the repository a pull with credentials came from (``CREDENTIALED_MARK``). The mark
    is a tag on the image just pulled; it names the repository, so it stays as long as any
    image holds it, whichever image that is."""
    try:
        client.api.tag(image, _credential_mark(image), tag="pulled")
    except DockerException as exc:
        raise WorkerStartError(f"the Docker daemon failed: {_explain(exc)}") from exc


def _pull(client: Any, image: str, auth: dict[str, str] | None, pulling: Pulling) -> None:
    repo, tag = split_reference(image)
    sink, given_up = pulling.sink, pulling.given_up
    sink.feed(f"[skiff] pulling {image}\n".encode())
    progress = PullProgress()
    try:
        for event in client.api.pull(repo, tag=tag, stream=True, decode=True, auth_config=auth):
            if "error" in event:
                raise WorkerStartError(pull_failure(image, str(event["error"])))
            if given_up():
                # Given up (the worker was stopped, the server shuts down): this thread
                # stops reading; the daemon may finish the pull for a later start.
                raise WorkerStartError("the start was given up during the pull")
            line = progress.line(event)
            if line:
                sink.feed(line.encode())
    except DockerException as exc:
        raise WorkerStartError(pull_failure(image, _explain(exc))) from exc


def ensure_network(client: Any) -> str:
    """The id of ``NETWORK``, made where it is not there yet (by this server or another sharing
    the daemon). One that exists with containers reaching each other is refused: it would not
    keep tenants apart.

    Two servers (or two tests) making it at the same moment can both succeed: before API 1.44
    the daemon's duplicate check is best effort, and names need not be unique. On one host a
    start that does not find it looks again and makes it under a file lock, so only one is
    made; servers on other hosts sharing a daemon use the first by id, and remove the others
    (``_tenant_network``)."""
    try:
        network = _tenant_network(client)
        if network is None:
            # Only the make is locked: a start that finds the network takes no lock, and a
            # slow daemon holds up no start that needs none.
            with _host_lock("skiff-tenant-network.lock"):
                network = _make_network_once(client)
        options = (network.attrs or {}).get("Options") or {}
    except DockerException as exc:
        raise WorkerStartError(f"the network {NETWORK} could not be made: {_explain(exc)}") from exc
    for name, value in NETWORK_OPTIONS.items():
        if options.get(name) != value:
            raise WorkerStartError(
                f"the Docker network {NETWORK} lets containers reach each other ({name} is not "
                f"{value}): remove it (docker network rm {NETWORK}) and skiff makes it anew"
            )
    return str(network.id)


@contextlib.contextmanager
def _host_lock(name: str) -> Iterator[None]:
    """An exclusive lock shared by every process of this host (a file in its temporary
    directory), held for a brief step; released with the file's descriptor, even on a crash.
    Best effort: where the file cannot be opened (another user's, under protected_regular) or
    the lock is not had within ``_HOST_LOCK_WAIT_SECONDS`` (a hung daemon behind its holder),
    the step goes on without it, as servers on different hosts always do."""
    path = Path(tempfile.gettempdir()) / name
    try:
        fd = _open_lock_file(path)
    except OSError as exc:
        log.warning("going on without the host lock %s: %s", path, exc)
        yield
        return
    try:
        deadline = time.monotonic() + _HOST_LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    log.warning("going on without the host lock %s: still held", path)
                    break
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _open_lock_file(path: Path) -> int:
    # Read-only, and made only where missing: the file may be another user's (a lock needs no
    # write access, and O_CREAT on another's file in a sticky directory can be refused).
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o644)  # readable by other users' servers whatever the umask
        return fd


def _make_network_once(client: Any) -> Any:
    network = _tenant_network(client)
    if network is None:
        try:
            client.networks.create(
                NETWORK,
                driver="bridge",
                options=NETWORK_OPTIONS,
                labels={MARKER: "1"},
                check_duplicate=True,
            )
        except APIError as exc:
            if exc.status_code != 409:
                raise
        network = _tenant_network(client)
        if network is None:
            raise WorkerStartError(f"the network {NETWORK} was made and is gone")
    return network


def _tenant_network(client: Any) -> Any:
    """The network named ``NETWORK`` every server uses: the first by id where there are more
    (the name filter matches parts of names, so the name is compared whole)."""
    found = sorted(
        (n for n in client.networks.list(names=[NETWORK]) if n.name == NETWORK),
        key=lambda n: str(n.id),
    )
    # A container's start looks its network up by name, and refuses an ambiguous one: the
    # others go where no container uses them yet (the servers that made them use the first).
    for extra in found[1:]:
        if (extra.attrs or {}).get("Labels", {}).get(MARKER) == "1":
            with contextlib.suppress(DockerException):
                extra.remove()
    return found[0] if found else None


def create_container(
    client: Any, options: dict[str, Any], image: str, disk_gb: int | None, sink: LogSink | None
) -> Any:
    """``containers.create(**options)`` on ``NETWORK``, with ``disk_gb`` as a ``size`` storage
    option where the storage driver has one (else without it, and ``sink`` is told so)."""
    options = options | {"network": ensure_network(client)}
    if disk_gb:
        try:
            return client.containers.create(**options, storage_opt={"size": f"{disk_gb}G"})
        except APIError as exc:
            if "storage-opt" not in str(exc) and "storage opt" not in str(exc).lower():
                raise WorkerStartError(_explain(exc)) from exc
            if sink is not None:
                sink.feed(
                    b"[skiff] containerDiskInGb is not applied by this Docker storage driver:"
                    b" the disk check measures the container's disk instead\n"
                )
    try:
        return client.containers.create(**options)
    except ImageNotFound as exc:
        raise WorkerStartError(pull_failure(image, _explain(exc))) from exc
    except DockerException as exc:
        raise WorkerStartError(f"the container could not be created: {_explain(exc)}") from exc


def bounded_layer(container: Any) -> bool:
    """Whether the storage driver holds the container's layer to its size (it was created with
    the ``size`` storage option): nothing to measure, and Docker's measure walks every file."""
    return bool((container.attrs.get("HostConfig") or {}).get("StorageOpt"))


class Daemon:
    """The Docker daemon as a provider (workers' or pods') talks to it: ``client`` is a
    ``docker.DockerClient``, made from the environment on first use when none is given (a
    server on the local provider never needs a daemon)."""

    def __init__(self, client: Any = None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker.from_env()
        return self._client

    def layer_bytes(self, running: dict[str, Any]) -> dict[str, int]:
        """``SizeRw`` (what a container wrote to its own layer) of each of the ``running``
        containers (by the key each is reported by) whose layer its driver does not bound; none
        (logged) when the daemon cannot say. Docker sums the layer's files for it, so this is
        one call for all of them."""
        containers = {c.id: key for key, c in running.items() if not bounded_layer(c)}
        if not containers:
            return {}
        try:
            listed = self.client.api.containers(size=True, filters={"id": list(containers)})
        except (DockerException, OSError) as exc:  # OSError: the daemon's socket (requests')
            log.warning("measuring containers' layers failed: %s", exc)
            return {}
        return {
            containers[found["Id"]]: int(found.get("SizeRw") or 0)
            for found in listed
            if found.get("Id") in containers
        }

    def labelled(self, marker: str, label: str, what: str) -> list[Any]:
        """The containers, in any state, carrying ``marker``=1 and ``label``; none (logged)
        when the daemon cannot list them. The caller checks the labels again: a filter the
        daemon ignores (an old API) must never widen what is removed."""
        try:
            found: list[Any] = self.client.containers.list(
                all=True, ignore_removed=True, filters={"label": [f"{marker}=1", label]}
            )
        except DockerException as exc:
            log.warning("listing skiff's %s failed: %s", what, exc)
            return []
        return found


@define(eq=False, repr=False, slots=False, on_setattr=setters.NO_OP)
class DockerProvider:
    """``owner`` (this replica's id) and ``server`` (``server_identity``) are written on every
    container it starts; ``client`` is a ``docker.DockerClient`` (from the environment,
    ``DOCKER_HOST`` included, by default)."""

    runs_images = True
    slow_starts = True

    _on_exit: ExitCallback
    _logs: LogSinks = field(kw_only=True)
    _owner: str = field(kw_only=True)
    _server: str = field(kw_only=True)
    _daemon: Daemon = field(kw_only=True, default=None, converter=Daemon, alias="client")
    _pids_limit: int = field(kw_only=True, default=DEFAULT_PIDS_LIMIT)
    _running: dict[str, Any] = field(init=False, factory=dict)
    _served: dict[str, ServedAt | None] = field(init=False, factory=dict)
    _watchers: set[asyncio.Task[None]] = field(init=False, factory=set)

    @property
    def client(self) -> Any:
        return self._daemon.client

    def worker_url(self, base_url: str) -> str:
        return gateway_url(base_url)

    def host_environment(self) -> dict[str, str]:
        return {}

    async def sandbox_problem(self) -> str | None:
        # A container is its own sandbox: namespaces, no host files but its volume.
        return None

    async def volume_mount_problem(self) -> str | None:
        # A bind mount needs nothing beyond the daemon. The directory is the daemon's host's:
        # with a remote ``DOCKER_HOST``, SKIFF_VOLUMES_DIR must be shared with that host.
        return None

    async def start(self, launch: Launch) -> int:
        spec = launch.container
        if spec is None:
            raise WorkerStartError("the container provider was given no image to run")
        sink = self._logs(launch.endpoint_id, launch.worker_id, launch.user_id)
        container = await bring_up_in_daemon(
            lambda handover: self._bring_up(launch, spec, sink, handover), sink
        )
        self._running[launch.worker_id] = container
        if launch.serves is not None:
            self._served[launch.worker_id] = served_at(container.attrs, launch.serves)
        pump = asyncio.create_task(self._pump(launch.worker_id, container, sink))
        task = asyncio.create_task(self._watch(launch.worker_id, container, pump))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)
        return int(container.attrs.get("State", {}).get("Pid") or 0)

    def _bring_up(
        self, launch: Launch, spec: ContainerSpec, sink: LogSink, handover: _Handover
    ) -> Any:
        """Pull, create and start the container (blocking, in a thread); handed over to the
        caller unless it gave up meanwhile, in which case it is removed here."""
        ensure_image(self.client, spec.image, spec.credentials, sink, lambda: handover.abandoned)
        if handover.abandoned:
            raise WorkerStartError("the start was given up")
        container = self._create(launch, spec, sink)
        return start_and_hand_over(container, handover)

    def create_container(self, launch: Launch) -> Any:
        """Create (not start) the worker's container, the image already here: what Docker
        records of it can then be read (``HostConfig.DeviceRequests`` on a host without GPUs)."""
        assert launch.container is not None
        return self._create(launch, launch.container, None)

    def _create(self, launch: Launch, spec: ContainerSpec, sink: LogSink | None) -> Any:
        options = create_options(launch, spec, self._owner, self._server, self._pids_limit)
        return create_container(self.client, options, spec.image, spec.disk_gb, sink)

    async def _pump(self, worker_id: str, container: Any, sink: LogSink) -> None:
        try:
            stream: Iterator[bytes] = await asyncio.to_thread(
                container.logs, stream=True, follow=True, stdout=True, stderr=True
            )
            while (chunk := await asyncio.to_thread(next, stream, None)) is not None:
                if hold := sink.feed(chunk):
                    # Docker keeps the rest meanwhile, in its own log (and the container's
                    # writes wait on its pipe once that is full).
                    await asyncio.sleep(hold)
        except Exception:
            log.exception("copying the output of worker %s failed", worker_id)
        finally:
            sink.close()

    async def _watch(self, worker_id: str, container: Any, pump: asyncio.Task[None]) -> None:
        try:
            result = await asyncio.to_thread(container.wait)
            code = int(result.get("StatusCode", -1))
        except DockerException as exc:
            log.warning("waiting for worker %s failed: %s", worker_id, exc)
            code = -1
        done, _ = await asyncio.wait({pump}, timeout=_DRAIN_SECONDS)
        if not done:
            pump.cancel()
            await asyncio.wait({pump})
        with contextlib.suppress(DockerException):
            await asyncio.to_thread(container.remove, force=True)
        self._running.pop(worker_id, None)
        self._served.pop(worker_id, None)
        try:
            await self._on_exit(worker_id, code)
        except Exception:
            log.exception("handling the exit of worker %s failed", worker_id)

    async def stop(self, worker_id: str, grace: float) -> None:
        """``docker stop``: the image's stop signal (SIGTERM), then SIGKILL after ``grace``."""
        container = self._running.get(worker_id)
        if container is None:
            return
        with contextlib.suppress(NotFound):
            try:
                await asyncio.to_thread(container.stop, timeout=max(0, round(grace)))
            except DockerException as exc:
                log.warning("stopping worker %s failed: %s", worker_id, exc)

    async def stop_all(self, grace: float) -> None:
        await asyncio.gather(*(self.stop(w, grace) for w in list(self._running)))
        if self._watchers:
            await asyncio.wait(set(self._watchers), timeout=10)

    def running(self) -> list[str]:
        return list(self._running)

    async def layer_bytes(self) -> dict[str, int]:
        return await asyncio.to_thread(self._daemon.layer_bytes, dict(self._running))

    def served_at(self, worker_id: str) -> ServedAt | None:
        return self._served.get(worker_id)

    def kill_leftover(self, worker_id: str, pid: int) -> bool:
        """End the container of a worker left by an earlier server process, found by its
        labels (never by pid): nothing without skiff's marker is touched."""
        found = False
        for container in self._ours(f"{WORKER_LABEL}={worker_id}"):
            if worker_id in self._running:
                continue
            with contextlib.suppress(DockerException):
                container.remove(force=True)
                found = True
        return found

    def end_leftovers(self) -> list[str]:
        """At start-up, before the server answers: remove every container an earlier run of
        this server left (its labels name this server but another replica id), record or no
        record. Ended rather than adopted: its worker calls in with the old run's identity and
        its output stream and exit were watched by a process that is gone; the jobs it held go
        back to the queue (the worker's record is swept, or its lease runs out) and the scaler
        starts fresh workers. Returns the worker ids of the containers removed."""
        ended = []
        for container in self._ours(f"{SERVER_LABEL}={self._server}"):
            found = container.labels
            if found.get(SERVER_LABEL) != self._server or found.get(OWNER_LABEL) == self._owner:
                continue
            try:
                container.remove(force=True)
            except NotFound:
                continue
            except DockerException as exc:
                log.warning("removing the leftover container %s failed: %s", container.name, exc)
                continue
            ended.append(found[WORKER_LABEL])
        if ended:
            log.info("ended %d container(s) left by an earlier run: %s", len(ended), ended)
        return ended

    def _ours(self, label: str) -> list[Any]:
        return [c for c in self._daemon.labelled(MARKER, label, "containers") if is_ours(c.labels)]


class _Handover:
    """A started container passing from the starting thread to the waiting coroutine, or
    removed when the coroutine was cancelled first (whichever comes second removes it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.abandoned = False
        self._container: Any = None

    def give(self, container: Any) -> None:
        with self._lock:
            if not self.abandoned:
                self._container = container
                return
        _remove_quietly(container)

    def abandon(self) -> threading.Thread | None:
        """Give up; returns the thread removing a container already handed over, if any."""
        with self._lock:
            self.abandoned = True
            container, self._container = self._container, None
        if container is None:
            return None
        # Not awaited (the caller is being cancelled) and not on the loop (it may be
        # closing): a thread of its own, which the interpreter waits for at exit.
        remover = threading.Thread(target=_remove_quietly, args=(container,))
        remover.start()
        return remover


def start_and_hand_over(container: Any, handover: _Handover) -> Any:
    """Start a created container (a worker's or a pod's) and hand it to the waiting start; one
    that cannot start is removed, and the refusal says why."""
    try:
        container.start()
        container.reload()
    except DockerException as exc:
        with contextlib.suppress(DockerException):
            container.remove(force=True)
        raise WorkerStartError(f"the container could not start: {_explain(exc)}") from exc
    handover.give(container)
    return container


async def bring_up_in_daemon(work: Callable[[_Handover], T], sink: LogSink) -> T:
    """A container's pull, create and start (``work``, given the start's ``_Handover``) in a
    daemon thread. Given up (the caller cancelled), the container is removed once it exists:
    the daemon goes on with what it was asked after the server stops waiting (a shutdown
    cancels a start midway), so none outlives a start that was given up. Why a start failed
    goes into the log; the log is closed either way it fails."""
    handover = _Handover()
    try:
        return await _in_daemon_thread(lambda: work(handover))
    except asyncio.CancelledError:
        handover.abandon()
        sink.close()
        raise
    except BaseException as exc:
        if isinstance(exc, WorkerStartError):
            sink.feed(f"[skiff] {exc}\n".encode())
        sink.close()
        raise


async def _in_daemon_thread(work: Callable[[], T]) -> T:
    """``work()`` in a thread of its own that does not hold up the process's exit, unlike
    ``asyncio.to_thread``'s: a pull from a registry that stopped answering can block for as
    long as the connection stays open, and a server shutting down must not wait for it (the
    start was given up; ``_Handover`` removes whatever it still makes)."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if outcome.done():  # the waiter was cancelled meanwhile
            return
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = work(), None
        except BaseException as exc:
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="skiff-container-start", daemon=True).start()
    return await outcome


def _remove_quietly(container: Any) -> None:
    try:
        container.remove(force=True)
    except DockerException as exc:
        log.warning("removing the container %s of a given-up start failed: %s", container.name, exc)


class PullProgress:
    """Pull events as log lines: each layer's steps, and its download in quarters, so a large
    pull shows it is moving without a line per chunk."""

    def __init__(self) -> None:
        self._quarters: dict[str, int] = {}

    def line(self, event: dict[str, Any]) -> str | None:
        status = event.get("status")
        layer = event.get("id") or ""
        if not status:
            return None
        if status == "Downloading":
            detail = event.get("progressDetail") or {}
            total, current = detail.get("total") or 0, detail.get("current") or 0
            if total <= 0:
                return None
            quarter = min(4, current * 4 // total)
            if quarter <= self._quarters.get(layer, 0):
                return None
            self._quarters[layer] = quarter
            return (
                f"[skiff] pull: {layer}: downloading {current * 100 // total}% of {total} bytes\n"
            )
        if status in ("Extracting", "Waiting"):
            return None
        return f"[skiff] pull: {layer + ': ' if layer else ''}{status}\n"


def _explain(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)
