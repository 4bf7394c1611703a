"""Pods as process groups on this host (``SKIFF_PROVIDER=local``), through the same process
machinery as local workers (``local.py``): the pod's ``dockerEntrypoint + dockerStartCmd`` runs
in its own session, its output goes into its log, and it dies with the server.

It runs in the sandbox of local workers (``bubblewrap.py``), its volume bound at its mount path,
which can only be a top-level directory (``/workspace``, the default). Its home and working
directory is its scratch directory, which a fresh start wipes: what a container's disk is to a
container pod; in the sandbox it is seen at ``/root`` too, where the hosted platform's pods keep
their home. Its ports are the ports the process opens on this host, reported as given: in the
sandbox it may bind those only (``port_fence.py``), and a port that another pod running here
declares, one kept for load-balancing workers (``served_ports.py``) or one of the ephemeral
range, which any process may bind, is refused at its start. The image is not used.

A session in the pod (``enter``: SSH, the console's terminal) is a second sandbox made as the
pod's own: the same files, home, volume, GPUs and environment, plus the hosted platform's
``/etc/rp_environment`` (the pod's environment as ``export`` lines, which the runpod CLI
sources) and a ``~/.bashrc`` where the home has none. Its processes are its own: a PID
namespace apart from the pod's command, so ``ps`` in a session shows the session's. Sessions
end when the pod stops or restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from skiff.domain.pod_sessions import EntryRequest
from skiff.domain.pods import PodSpec, parse_port
from skiff.providers import bubblewrap, port_fence
from skiff.providers.base import (
    EntryRefused,
    Launch,
    LogSinks,
    PodEntry,
    PodExitCallback,
    PodInstance,
    PodLaunch,
    WorkerStartError,
)
from skiff.providers.bubblewrap import Sandbox
from skiff.providers.cgroups import Cgroups
from skiff.providers.local import LocalProvider
from skiff.providers.pod_commands import process_argv
from skiff.providers.pod_entry import (
    CONTROLLING_TERMINAL_SHIM,
    ENVIRONMENT_FILE,
    ProcessEntry,
    environment_lines,
    shell_argv,
)
from skiff.served_ports import reserved_ports

log = logging.getLogger(__name__)

#: What a pod with no command is told: the local provider runs commands, not images.
NO_COMMAND = (
    "a pod here runs as a process (SKIFF_PROVIDER=local) and runs its "
    "dockerEntrypoint and dockerStartCmd, not its image's; this pod has neither: give the "
    'command it runs, such as ["python3", "-m", "http.server", "8888"]'
)


def command_problem(spec: PodSpec, inherited: dict[str, str]) -> str | None:
    """Why the pod's command cannot start as a process, checked when the pod is created or its
    command changes, so that it is refused (400) rather than started again and again: none at
    all, or a program that is not there. A name is looked up on the ``PATH`` it will run with
    (its ``env``'s, else the server's); an absolute path must be an executable file, unless it
    lies in the pod's volume, which only the pod sees; a relative path would be looked for in
    its home, which is empty when it starts."""
    argv = [*spec.dockerEntrypoint, *spec.dockerStartCmd]
    if not argv:
        return NO_COMMAND
    program = argv[0]
    if "/" not in program:
        path = spec.env.get("PATH", inherited.get("PATH", os.defpath))
        if shutil.which(program, path=path) is None:
            return f"{program!r} is not a program on this host (looked for on PATH={path})"
        return None
    if not program.startswith("/"):
        return (
            f"{program!r} is a relative path, looked for in the pod's home, which is "
            "empty when it starts: give the program's absolute path"
        )
    has_volume = spec.volumeInGb > 0 or spec.networkVolumeId is not None
    mount = spec.volumeMountPath.rstrip("/")
    # Normalised first: "/workspace/../etc/x" is not in the volume.
    if has_volume and os.path.normpath(program).startswith(f"{mount}/"):
        return None  # in its volume: the pod (or an earlier one) puts it there
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        # One answer whether the path is missing or only not executable: a file the sandbox
        # hides (the data directory, /etc/shadow) must not be told apart from none.
        return f"{program!r} is not an executable file on this host"
    return None


def process_launch(launch: PodLaunch, inherited: dict[str, str]) -> Launch:
    """The pod as a process: its command, the server's environment minus its secrets under
    the pod's variables, its home as ``HOME`` and working directory."""
    argv = process_argv(launch, runs_as="a pod run as a process", provider="local")
    if launch.volume is not None:
        problem = bubblewrap.mount_problem(launch.mount_path)
        if problem is not None:
            raise WorkerStartError(problem)
    home = launch.home.resolve()
    env = inherited | launch.env | {"HOME": str(home)}
    if launch.gpu_indices:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in launch.gpu_indices)
    return Launch(
        worker_id=launch.pod_id,
        endpoint_id=launch.pod_id,
        argv=argv,
        env=env,
        home=home,
        volume=launch.volume,
        volume_mount=launch.mount_path,
        cwd=home,
        gpus=launch.gpus,
        vcpus=launch.vcpus,
        memory_bytes=launch.memory_bytes,
        sandboxed=launch.sandboxed,
        home_also_at=POD_HOME,
        binds=tuple(parse_port(p).number for p in launch.ports),
        user_id=launch.user_id,
    )


#: Where a sandboxed pod sees its home besides its own path, as the hosted platform's pods do.
POD_HOME = "/root"


def entry_launch(process: Launch, request: EntryRequest, environment: Path) -> Launch:
    """A session's process, made as the pod's own ``process``: its shell running the request,
    through ``CONTROLLING_TERMINAL_SHIM`` on a terminal, with ``environment`` (written from the
    pod's environment) at ``ENVIRONMENT_FILE``."""
    argv = shell_argv(request)
    if request.terminal is not None:
        argv = [sys.executable, "-S", "-I", "-c", CONTROLLING_TERMINAL_SHIM, *argv]
    env = process.env | dict(request.env)
    return dataclasses.replace(
        process,
        argv=argv,
        env=env,
        files={ENVIRONMENT_FILE: environment},
        serves=None,
        # What the pod's own command sees of the host, never more: the session's command line
        # is the tenant's text, not a list of files to show it.
        reach=(*process.argv, *process.reach),
        argv_needed=False,
    )


class LocalPodProvider:
    def __init__(
        self,
        on_exit: PodExitCallback,
        *,
        logs: LogSinks,
        sandbox: Sandbox | None = None,
        cgroups: Cgroups | None = None,
        pids_limit: int | None = None,
    ) -> None:
        """``cgroups``, ``pids_limit``: each pod's caps, as ``LocalProvider`` has them."""
        self._on_exit = on_exit
        # A pod is a long-lived machine of its own, not a worker: started as its command
        # says, never forked from a worker's zygote.
        self._processes = LocalProvider(
            self._ended,
            logs=logs,
            sandbox=sandbox,
            fork_servers=False,
            cgroups=cgroups,
            pids_limit=pids_limit,
        )
        # Kept from pods where the sandbox fences ports (unfenced, any process binds any
        # port): load-balancing workers' own, and the ephemeral range, which every process may
        # bind (``port_fence.py``).
        self._kept_ports: list[tuple[range, str]] = []
        if sandbox is not None and sandbox.fenced:
            served = reserved_ports()
            if served is not None:
                self._kept_ports.append((served, "load-balancing workers"))
            self._kept_ports.append((port_fence.ephemeral_ports(), "any process to bind"))
        self._instances: dict[str, tuple[PodInstance, Launch]] = {}
        #: The ports of the pods being started, not yet in ``_instances``.
        self._claims: dict[str, tuple[int, ...]] = {}
        #: Sessions in each pod (``enter``): ended with it.
        self._entries: dict[str, set[PodEntry]] = {}
        #: Each pod's ``/etc/rp_environment`` for its sessions, removed with its instance.
        self._environments: dict[str, Path] = {}
        #: Pods skiff stops or restarts -> set once their process's end has been handled (it
        #: comes once their output is drained, after ``LocalProvider.stop`` has returned): not
        #: an exit to report.
        self._quiet: dict[str, asyncio.Event] = {}

    async def _ended(self, pod_id: str, code: int) -> None:
        ended = self._quiet.pop(pod_id, None)
        if ended is not None:
            ended.set()
            return
        self._instances.pop(pod_id, None)
        self._end_entries(pod_id)
        await self._on_exit(pod_id, code)

    async def start(self, launch: PodLaunch) -> PodInstance:
        process = process_launch(launch, self._processes.host_environment())
        self._check_ports(launch.pod_id, process.binds)
        # Claimed before the start's first wait: pods started together see each other's ports.
        self._claims[launch.pod_id] = process.binds
        try:
            await self._processes.start(process)
        finally:
            self._claims.pop(launch.pod_id, None)
        ports = {p: parse_port(p).number for p in launch.ports}
        instance = PodInstance(launch.pod_id, launch.version, ports)
        self._instances[launch.pod_id] = (instance, process)
        return instance

    def ports_problem(self, spec: PodSpec) -> str | None:
        return self._kept_problem([parse_port(p).number for p in spec.ports])

    def _kept_problem(self, ports: Iterable[int]) -> str | None:
        """The ports kept for load-balancing workers (``served_ports.py``) and the ephemeral
        range are no pod's, where the sandbox fences ports."""
        for kept, whose in self._kept_ports:
            inside = sorted(p for p in ports if p in kept)
            if inside:
                return (
                    f"port {inside[0]} is among the ports this host keeps for {whose} "
                    f"({kept.start}-{kept.stop - 1}): a pod run as a process serves on the "
                    "host's own ports; declare one below them in `ports`"
                )
        return None

    def _check_ports(self, pod_id: str, ports: tuple[int, ...]) -> None:
        """A port is one pod's on this host: the sandbox lets a pod bind the ports it declares
        (``port_fence.py``), so a second pod declaring one that runs would be sent the first's
        requests, or the first the second's. Whoever started first keeps it. A pod stored
        before its ports were kept is refused here (``ports_problem`` refuses it when made)."""
        kept = self._kept_problem(ports)
        if kept is not None:
            raise WorkerStartError(kept)
        held = {other_id: other.binds for other_id, (_, other) in self._instances.items()}
        for other_id, binds in (held | self._claims).items():
            shared = set(ports) & set(binds)
            if other_id != pod_id and shared:
                raise WorkerStartError(
                    f"port {min(shared)} is served by another pod on this host: a pod run as a "
                    "process serves on the host's own ports; declare another in `ports`"
                )

    async def restart(self, pod_id: str, grace: float) -> PodInstance | None:
        found = self._instances.get(pod_id)
        if found is None:
            return None
        instance, process = found
        await self._end(pod_id, grace)
        # Started again as it was: its home (the pod's disk) is kept.
        await self._processes.start(process)
        return instance

    async def stop(self, pod_id: str, grace: float) -> None:
        if self._instances.pop(pod_id, None) is None:
            return
        await self._end(pod_id, grace)

    async def enter(self, pod_id: str, request: EntryRequest) -> PodEntry:
        found = self._instances.get(pod_id)
        if found is None:
            raise EntryRefused(f"pod {pod_id} is not running")
        _, process = found
        environment = self._environments[pod_id] = self._environment_file(process)
        await asyncio.to_thread(_write_private, environment, environment_lines(process.env))
        home = process.home
        # The runpod CLI's commands begin with ``source /root/.bashrc``. The home is the
        # tenant's to write: made only where nothing (not even a symlink) is there.
        await asyncio.to_thread(_make_empty, home / ".bashrc")
        argv, env = self._processes.entry_command(entry_launch(process, request, environment))
        entry = await ProcessEntry.start(
            argv, env=env, cwd=str(process.cwd or home), terminal=request.terminal
        )
        if self._instances.get(pod_id) is not found:
            # The pod stopped or exited while the session started: it ends with it.
            entry.end()
            await entry.wait()
            raise EntryRefused(f"pod {pod_id} is not running")
        entries = self._entries.setdefault(pod_id, set())
        entries.add(entry)
        task = asyncio.create_task(entry.wait())
        task.add_done_callback(lambda _: entries.discard(entry))
        return entry

    def _environment_file(self, process: Launch) -> Path:
        # Beside the pod's home, not in it: the pod's own files are its user's to change.
        return process.home.parent / f"{process.worker_id}.rp_environment"

    def _end_entries(self, pod_id: str) -> None:
        for entry in self._entries.pop(pod_id, set()):
            entry.end()
        environment = self._environments.pop(pod_id, None)
        if environment is not None:
            # The pod's environment (its secrets among it) is kept no longer than its instance.
            with contextlib.suppress(OSError):
                environment.unlink()

    async def _end(self, pod_id: str, grace: float) -> None:
        """Stop the process and wait until its end is handled, so a start under the same id
        that follows is not mistaken for it."""
        self._end_entries(pod_id)
        ended = self._quiet[pod_id] = asyncio.Event()
        await self._processes.stop(pod_id, grace)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await ended.wait()

    def command_problem(self, spec: PodSpec) -> str | None:
        return command_problem(spec, self._processes.host_environment())

    async def sandbox_problem(self) -> str | None:
        return await self._processes.sandbox_problem()

    def running(self) -> list[PodInstance]:
        return [instance for instance, _ in self._instances.values()]

    async def adopt(self) -> list[PodInstance]:
        # A process dies with the server that started it: nothing to take over.
        return []

    async def close(self) -> None:
        for pod_id in self._instances:
            self._end_entries(pod_id)
            self._quiet[pod_id] = asyncio.Event()
        self._instances.clear()
        await self._processes.stop_all(5.0)


def _write_private(path: Path, text: str) -> None:
    """``text`` into ``path`` (a file of the server's own, never a link), readable by the
    server's user alone (a pod's environment holds its secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)


def _make_empty(path: Path) -> None:
    """An empty file at ``path``, where nothing is: whatever is there (a file, a link a
    tenant planted to make the server write elsewhere) is left alone."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
