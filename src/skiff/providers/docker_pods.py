"""Pods as containers of their image, through the Docker Engine API (as ``docker.py`` does for
workers, whose pull and create it shares).

A pod's container publishes each of its ports on a host port Docker picks (an ``http`` port and
a ``tcp`` one alike: both are TCP to Docker; ``http`` says the pod serves a web page there),
mounts the pod's volume at its mount path, gets exactly its GPUs through a device request, and
carries labels naming the pod, its version and the server: a container of a pod outlives the
server (a pod is long-running), and the next run of the server adopts it (``adopt``) instead of
starting it again. Containers without skiff's pod marker, or of another server, are never
touched.

Stopping a pod removes its container: as on the hosted platform, the container disk lasts until
the pod stops, its volume until it is deleted. ``restart`` restarts the container in place.

A session in a pod (``enter``: SSH, the console's terminal) is a ``docker exec`` in its running
container (``docker_entry.py``), as the container's own user in its own working directory.
Before a container's first session, the hosted platform's ``/etc/rp_environment`` (the
container's environment as ``export`` lines, which the runpod CLI sources) and an empty
``/root/.bashrc`` are made in it, each only where the image has none. Sessions end with the
container: when the pod stops or restarts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from typing import Any

from attrs import define, field, setters
from docker.errors import DockerException, NotFound  # type: ignore[import-untyped]

from skiff.domain.containers import DEFAULT_PIDS_LIMIT
from skiff.domain.pod_sessions import EntryRequest
from skiff.domain.pods import PodSpec, parse_port
from skiff.providers.base import (
    EntryRefused,
    LogSink,
    LogSinks,
    PodEntry,
    PodExitCallback,
    PodInstance,
    PodLaunch,
    WorkerStartError,
)
from skiff.providers.docker import (
    ENDPOINT_LABEL,
    MARKER,
    OWNER_LABEL,
    POD_MARKER,
    SERVER_LABEL,
    WORKER_LABEL,
    Daemon,
    _explain,
    _Handover,
    _in_daemon_thread,
    bring_up_in_daemon,
    create_container,
    ensure_image,
    published_port,
    run_options,
    start_and_hand_over,
)
from skiff.providers.docker_entry import ExecEntry, container_environment, entry_argv, prepare

log = logging.getLogger(__name__)

#: Every pod container carries this label (not the workers' marker: their sweeps never see
#: a pod, nor this provider a worker).
POD_LABEL = "dev.skiff.pod-id"
VERSION_LABEL = "dev.skiff.pod-version"
#: The pod's ports (``8888/http,22/tcp``): an adopted container says which ports it publishes.
PORTS_LABEL = "dev.skiff.pod-ports"
#: Whose pod it is: a container followed again after a restart of the server shares its
#: user's log pace (``LogSinks``) as at its start.
USER_LABEL = "dev.skiff.pod-user"
_DRAIN_SECONDS = 2.0


def pod_labels(launch: PodLaunch, server: str) -> dict[str, str]:
    """A pod container's labels; a worker's are set empty, whatever its image says
    (``docker.labels``): an image cannot make a pod's container pass for a worker's."""
    return {
        MARKER: "",
        WORKER_LABEL: "",
        ENDPOINT_LABEL: "",
        OWNER_LABEL: "",
        POD_MARKER: "1",
        POD_LABEL: launch.pod_id,
        VERSION_LABEL: str(launch.version),
        PORTS_LABEL: ",".join(launch.ports),
        SERVER_LABEL: server,
        USER_LABEL: launch.user_id or "",
    }


def _log_of(logs: LogSinks, pod_id: str, container: Any) -> LogSink:
    """The log of a pod's container followed again (restarted, or found at the server's
    start), with its user's pace as its label says."""
    return logs(pod_id, pod_id, container.labels.get(USER_LABEL) or None)


def pod_create_options(
    launch: PodLaunch, server: str, pids_limit: int = DEFAULT_PIDS_LIMIT
) -> dict[str, Any]:
    """The arguments of ``containers.create`` for a pod (pure, so tests can read them)."""
    options = run_options(launch, launch.env, pids_limit=pids_limit)
    options |= {
        "labels": pod_labels(launch, server),
        "name": f"skiff-pod-{launch.pod_id}",
        # Every port on a host port of Docker's choosing, on every address of the host.
        "ports": {f"{parse_port(p).number}/tcp": None for p in launch.ports},
    }
    if launch.volume is not None:
        # Absolute: Docker takes a relative source for the name of a named volume, and refuses
        # one with a "/" in it.
        source = str(launch.volume.resolve())
        options["volumes"] = {source: {"bind": launch.mount_path, "mode": "rw"}}
    return options


def port_mappings(container_attrs: dict[str, Any], ports: list[str]) -> dict[str, int]:
    """``"8888/http"`` -> the host port Docker published it on, from a started container's
    ``NetworkSettings``; a port not published (yet) is left out."""
    found: dict[str, int] = {}
    for text in ports:
        host_port = published_port(container_attrs, parse_port(text).number)
        if host_port is not None:
            found[text] = host_port
    return found


def declared_ports(container: Any) -> list[str]:
    """The pod's ports as its container was made with them (``PORTS_LABEL``)."""
    declared = container.labels.get(PORTS_LABEL, "")
    return declared.split(",") if declared else []


def _feed_on(loop: asyncio.AbstractEventLoop, sink: LogSink, chunk: bytes) -> float:
    """From the output's thread: ``chunk`` fed on the loop (the sink is the loop's), and the
    log's pace to wait out. RuntimeError once the loop is gone (the server stopped)."""
    fed: concurrent.futures.Future[float] = concurrent.futures.Future()
    loop.call_soon_threadsafe(lambda: fed.set_result(sink.feed(chunk)))
    while True:
        try:
            return fed.result(timeout=1.0)
        except concurrent.futures.TimeoutError:
            if loop.is_closed():
                raise RuntimeError("the event loop is closed") from None


def _copy_output(
    loop: asyncio.AbstractEventLoop, container: Any, sink: LogSink, since: int | None
) -> None:
    """A daemon thread's work: the container's output into ``sink``, on the loop, until the
    container stops. A thread of its own because a pod may outlive the server: a pool thread
    blocked on its output would hold up the server's exit. Each chunk is fed before the next is
    read, and the log's pace is waited out here (Docker keeps the rest meanwhile)."""
    try:
        stream = container.logs(stream=True, follow=True, stdout=True, stderr=True, since=since)
        for chunk in stream:
            if hold := _feed_on(loop, sink, chunk):
                time.sleep(hold)
    except Exception as exc:  # the container went, the daemon restarted: the copy ends
        log.info("the output of %s is no longer followed: %s", container.name, exc)
    finally:
        with contextlib.suppress(RuntimeError):  # the loop closed: the server is gone
            loop.call_soon_threadsafe(sink.close)


@define(eq=False, repr=False, slots=False, on_setattr=setters.NO_OP)
class DockerPodProvider:
    """``server`` (``docker.server_identity``) is written on every pod container and is how a
    later run finds its own; ``client`` is a ``docker.DockerClient`` (from the environment by
    default)."""

    _on_exit: PodExitCallback
    _logs: LogSinks = field(kw_only=True)
    _server: str = field(kw_only=True)
    _daemon: Daemon = field(kw_only=True, default=None, converter=Daemon, alias="client")
    _pids_limit: int = field(kw_only=True, default=DEFAULT_PIDS_LIMIT)
    _running: dict[str, tuple[Any, PodInstance]] = field(init=False, factory=dict)
    #: Pods being stopped or restarted by skiff: their container's end is not an exit.
    _quiet: set[str] = field(init=False, factory=set)
    _watchers: dict[str, asyncio.Task[None]] = field(init=False, factory=dict)
    #: Containers made ready for sessions (``docker_entry.prepare``), by id.
    _prepared: set[str] = field(init=False, factory=set)

    @property
    def client(self) -> Any:
        return self._daemon.client

    async def start(self, launch: PodLaunch) -> PodInstance:
        sink = self._logs(launch.pod_id, launch.pod_id, launch.user_id)
        # Stopped or deleted during the start: the container is removed once it exists.
        container = await bring_up_in_daemon(
            lambda handover: self._bring_up(launch, sink, handover), sink
        )
        instance = PodInstance(
            launch.pod_id, launch.version, port_mappings(container.attrs, list(launch.ports))
        )
        self._follow(container, instance, sink)
        return instance

    def _bring_up(self, launch: PodLaunch, sink: LogSink, handover: _Handover) -> Any:
        # A container of an earlier instance (a stop that failed half way) is in the way of
        # the name: it is this pod's, so it goes.
        for old in self._ours(f"{POD_LABEL}={launch.pod_id}"):
            with contextlib.suppress(DockerException):
                old.remove(force=True)
        ensure_image(
            self.client, launch.image, launch.credentials, sink, lambda: handover.abandoned
        )
        options = pod_create_options(launch, self._server, self._pids_limit)
        container = create_container(self.client, options, launch.image, launch.disk_gb, sink)
        return start_and_hand_over(container, handover)

    def _follow(
        self, container: Any, instance: PodInstance, sink: LogSink, since: int | None = None
    ) -> None:
        """Copy the container's output into its log (from ``since``, epoch seconds: an adopted
        or restarted container's earlier output is in the log already) and watch for its end."""
        self._running[instance.pod_id] = (container, instance)
        copier = threading.Thread(
            target=_copy_output,
            args=(asyncio.get_running_loop(), container, sink, since),
            name=f"skiff-pod-output-{instance.pod_id}",
            daemon=True,
        )
        copier.start()
        self._watchers[instance.pod_id] = asyncio.create_task(
            self._watch(instance.pod_id, container, copier)
        )

    async def _watch(self, pod_id: str, container: Any, copier: threading.Thread) -> None:
        try:
            result = await _in_daemon_thread(container.wait)
            code = int(result.get("StatusCode", -1))
        except DockerException as exc:
            log.warning("waiting for pod %s failed: %s", pod_id, exc)
            code = -1
        await asyncio.to_thread(copier.join, _DRAIN_SECONDS)
        if pod_id in self._quiet:
            return  # stopped or restarted by skiff: whoever did it carries on
        self._running.pop(pod_id, None)
        self._watchers.pop(pod_id, None)
        self._prepared.discard(container.id)
        with contextlib.suppress(DockerException):
            await asyncio.to_thread(container.remove, force=True)
        try:
            await self._on_exit(pod_id, code)
        except Exception:
            log.exception("handling the exit of pod %s failed", pod_id)

    async def _watched_out(self, pod_id: str) -> None:
        """The end of a container skiff stopped or restarted (``_quiet``) seen by its watcher,
        its output drained, so that its next watcher (after a restart) is the only one."""
        watcher = self._watchers.pop(pod_id, None)
        if watcher is not None:
            await asyncio.wait({watcher}, timeout=_DRAIN_SECONDS + 5)

    async def restart(self, pod_id: str, grace: float) -> PodInstance | None:
        found = self._running.get(pod_id)
        if found is None:
            return None
        container, instance = found
        self._quiet.add(pod_id)
        try:
            await asyncio.to_thread(container.restart, timeout=max(0, round(grace)))
            await self._watched_out(pod_id)
            await asyncio.to_thread(container.reload)
        except DockerException as exc:
            raise WorkerStartError(f"the container could not restart: {_explain(exc)}") from exc
        finally:
            self._quiet.discard(pod_id)
        # Docker may publish the ports on other host ports after a restart: read them again.
        restarted = PodInstance(
            pod_id, instance.version, port_mappings(container.attrs, declared_ports(container))
        )
        self._follow(
            container, restarted, _log_of(self._logs, pod_id, container), since=int(time.time())
        )
        return restarted

    async def stop(self, pod_id: str, grace: float) -> None:
        found = self._running.pop(pod_id, None)
        if found is None:
            return
        container, _ = found
        self._prepared.discard(container.id)
        self._quiet.add(pod_id)
        try:
            with contextlib.suppress(NotFound):
                await asyncio.to_thread(container.stop, timeout=max(0, round(grace)))
            await self._watched_out(pod_id)
            with contextlib.suppress(NotFound):
                await asyncio.to_thread(container.remove, force=True)
        except DockerException as exc:
            log.warning("stopping pod %s failed: %s", pod_id, exc)
        finally:
            self._quiet.discard(pod_id)

    def command_problem(self, spec: PodSpec) -> str | None:
        return None  # none given: the image's own entrypoint and command run

    def ports_problem(self, spec: PodSpec) -> str | None:
        return None  # a container's ports are its own, published on ports Docker picks

    async def sandbox_problem(self) -> str | None:
        return None  # a container is its own sandbox

    async def enter(self, pod_id: str, request: EntryRequest) -> PodEntry:
        found = self._running.get(pod_id)
        if found is None:
            raise EntryRefused(f"pod {pod_id} is not running")
        container, _ = found
        api = self.client.api
        try:
            if container.id not in self._prepared:
                await prepare(api, container.id, container_environment(container.attrs))
                self._prepared.add(container.id)
            entry = await ExecEntry.start(
                api, container.id, entry_argv(request), request.env, request.terminal
            )
        except (DockerException, OSError) as exc:  # the container stopped, the daemon went
            raise EntryRefused(f"pod {pod_id} cannot be entered: {_explain(exc)}") from exc
        if self._running.get(pod_id) is not found:
            # Stopped or restarted while the session started: it ends with that instance.
            entry.end()
            raise EntryRefused(f"pod {pod_id} is not running")
        return entry

    def running(self) -> list[PodInstance]:
        return [instance for _, instance in self._running.values()]

    async def layer_bytes(self) -> dict[str, int]:
        running = {pod_id: container for pod_id, (container, _) in self._running.items()}
        return await asyncio.to_thread(self._daemon.layer_bytes, running)

    async def adopt(self) -> list[PodInstance]:
        found = await asyncio.to_thread(self._ours, f"{SERVER_LABEL}={self._server}")
        adopted = []
        for container in found:
            pod_id = container.labels.get(POD_LABEL, "")
            if not pod_id or pod_id in self._running:
                continue
            if container.status != "running":
                # Ended while no server watched it: removed, and the runner starts the pod
                # again if it is still wanted.
                with contextlib.suppress(DockerException):
                    await asyncio.to_thread(container.remove, force=True)
                continue
            version = int(container.labels.get(VERSION_LABEL, "0") or 0)
            instance = PodInstance(
                pod_id, version, port_mappings(container.attrs, declared_ports(container))
            )
            # Its output from now on (what it wrote while no server ran is in Docker's log).
            self._follow(
                container, instance, _log_of(self._logs, pod_id, container), since=int(time.time())
            )
            adopted.append(instance)
        return adopted

    async def close(self) -> None:
        # Pod containers outlive the server: only the watching stops.
        self._quiet.update(self._running)
        for watcher in self._watchers.values():
            watcher.cancel()
        if self._watchers:
            await asyncio.wait(set(self._watchers.values()), timeout=5)
        self._watchers.clear()
        self._running.clear()

    def _ours(self, label: str) -> list[Any]:
        return [
            c
            for c in self._daemon.labelled(POD_MARKER, label, "pod containers")
            if c.labels.get(POD_MARKER) == "1"
            and c.labels.get(POD_LABEL)
            and c.labels.get(SERVER_LABEL) == self._server
        ]
