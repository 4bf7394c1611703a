"""Workers as OS processes on this host.

Each worker is its own session (process group), so stopping it ends everything it started
(the runpod SDK forks a heartbeat process). On Linux each worker is also tied to the server
with PR_SET_PDEATHSIG: if the server dies, its workers die with it instead of polling a dead
port; the start-up sweep (``kill_leftover``) ends any process group that outlived it anyway.

A worker's stdout and stderr go through a pipe that skiff reads, not straight to a file, into the
``LogSink`` the logs service opens for it (``providers/base.py``): that caps and rotates the log
and stamps each line with the time it was read, wherever the log lives.

Each worker runs in the sandbox (``bubblewrap.py``: namespaces of its own, the data directory
and other tenants' files hidden, its volume at ``/runpod-volume``) unless the sandbox is off or
the launch runs without one (an administrator's worker on a host that cannot make one); a worker
without it that has a network volume still goes through bubblewrap, in a mount namespace that
only adds the volume. Either way it is the same process group, logged the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from skiff.datadir import make_private_dirs
from skiff.providers import bubblewrap, port_fence
from skiff.providers import cgroups as cgroup_views
from skiff.providers.base import (
    LOOPBACK,
    ExitCallback,
    Launch,
    LogSink,
    LogSinks,
    ServedAt,
    WorkerStartError,
)
from skiff.providers.bubblewrap import Sandbox
from skiff.providers.cgroups import (
    CGROUP_ENV,
    ZYGOTE_MEMORY_BYTES,
    Caps,
    Cgroups,
    Group,
    View,
    joining,
)
from skiff.providers.fork_server import (
    ForkServers,
    SandboxSpot,
    ZygoteKey,
    forkable,
)
from skiff.providers.forked import ForkedProcess
from skiff.providers.read_pipes import connect_read_end

log = logging.getLogger(__name__)


# What every shim does first: arm PDEATHSIG, make sure the parent did not die before that, and
# make what it becomes the first the kernel ends when memory runs out (``oom_score_adj`` 1000,
# which any process may raise for itself): a tenant's code that takes all of the host's memory
# ends itself, or another worker, never the server or the database. Costs a bare interpreter
# start (-S -I), a few milliseconds.
_PROLOGUE = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "os.getppid() == int(sys.argv[1]) or sys.exit(70)\n"
    "try:\n"
    "    with open('/proc/self/oom_score_adj', 'w') as adj: adj.write('1000')\n"
    "except OSError:\n"
    "    pass\n"
    # Into its cgroup (``cgroups.py``) before it runs anything of the tenant's; not at all
    # rather than uncapped.
    f"for g in filter(None, os.environ.pop('{CGROUP_ENV}', '').split('\\n')):\n"
    "    try:\n"
    "        with open(g, 'w') as procs: procs.write(str(os.getpid()))\n"
    "    except OSError as e:\n"
    "        sys.exit(f'skiff: could not join the cgroup {g}: {e}')\n"
)
# A worker behind bwrap must outlive the group's SIGTERM until the worker inside has ended
# (providers/bubblewrap.py): it is started with SIGTERM ignored.
_SHIELD = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
_EXEC = "os.execvpe(sys.argv[2], sys.argv[2:], os.environ)\n"

#: The prologue, then become the worker command.
_SHIM = _PROLOGUE + _EXEC
#: The same, shielded from SIGTERM, for bwrap.
_SHIELDED_SHIM = _PROLOGUE + _SHIELD + _EXEC
#: The shielded shim, which also fences the ports its process tree may bind (``port_fence.py``,
#: whose source comes first): the ports, comma-separated, come before the command.
_FENCED_SHIM = (
    port_fence.source()
    + "\n"
    + _PROLOGUE
    + _SHIELD
    + "fence_binds(int(p) for p in sys.argv[2].split(',') if p)\n"
    + "os.execvpe(sys.argv[3], sys.argv[3:], os.environ)\n"
)


def _shim_prefix(shim: str = _SHIM) -> list[str]:
    return [sys.executable, "-S", "-I", "-c", shim, str(os.getpid())]


def _shimmed(argv: list[str], shim: str = _SHIM) -> list[str]:
    if sys.platform != "linux":
        return argv
    return [*_shim_prefix(shim), *argv]


def _in_sandbox(command: list[str], sandbox: Sandbox, ports: Iterable[int] = ()) -> list[str]:
    """A sandbox's bwrap ``command`` behind the shim that starts it: the fenced one where the
    kernel can fence (its process tree binding only ``ports``), else the shielded one."""
    if not sandbox.fenced or sys.platform != "linux":
        return _shimmed(command, _SHIELDED_SHIM)
    return [*_shim_prefix(_FENCED_SHIM), ",".join(str(p) for p in sorted(ports)), *command]


def _own_ports(launch: Launch) -> set[int]:
    """The TCP ports ``launch``'s processes may bind: what it serves on, and a pod's own."""
    ports = set(launch.binds)
    if launch.serves is not None:
        ports |= {launch.serves.port, launch.serves.health_port}
    return ports


def _command(
    launch: Launch, sandbox: Sandbox | None, cwd: Path | None, view: View | None = None
) -> tuple[list[str], dict[str, str]]:
    """The worker's command line and the environment it starts with: in the sandbox when it
    has one (the loader's variables of its ``env`` set inside only, ``view`` what it shows of
    cgroups), else through bwrap only to show its network volume at ``/runpod-volume``, else
    as it is (providers/bubblewrap.py)."""
    if launch.sandboxed and sandbox is not None:
        outside, inside = bubblewrap.outside_and_inside(launch.env)
        command = sandbox.command(
            launch.argv,
            # The endpoint's homes, as a sandboxed fork server's workers have them: a worker
            # sees its endpoint's other workers' homes (and a cache they share), no one else's.
            home=launch.homes or launch.home,
            cwd=launch.cwd or cwd,
            env=launch.env,
            volume=launch.volume,
            mount=launch.volume_mount,
            gpu_indices=[g.index for g in launch.gpus],
            home_also_at=launch.home_also_at,
            files=launch.files,
            setenv=inside,
            reach=launch.reach,
            argv_needed=launch.argv_needed,
            cgroups=view or bubblewrap.NO_CGROUPS,
        )
        return _in_sandbox(command, sandbox, _own_ports(launch)), outside
    if launch.volume is None:
        return _shimmed(launch.argv), launch.env
    bwrap = bubblewrap.executable()
    if bwrap is None:
        raise FileNotFoundError(
            errno.ENOENT,
            f"bubblewrap (bwrap) is not installed (Debian's {bubblewrap.PACKAGE} package); it "
            "mounts the endpoint's network volume",
        )
    command = bubblewrap.mount_command(bwrap, launch.argv, launch.volume, mount=launch.volume_mount)
    return _shimmed(command, _SHIELDED_SHIM), launch.env


#: What a sandboxed worker inherits of the server's environment (names, or their beginnings):
#: where programs and libraries are, the locale and time zone, the GPU and maths libraries'
#: switches. Anything else it needs comes from its template's or endpoint's ``env``.
SANDBOX_INHERITS = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_",
    "TZ",
    "TERM",
    "LD_LIBRARY_PATH",
    "CUDA_",
    "NVIDIA_",
    "OPENBLAS_",
    "OMP_",
    "MKL_",
)


def _inside_numbering(launch: Launch) -> Launch:
    """A sandboxed worker sees only its own GPUs' device nodes, which CUDA numbers from 0:
    ``CUDA_VISIBLE_DEVICES`` is renumbered so (as inside a container). Only where the host has
    NVIDIA's nodes: a declared fleet (``SKIFF_GPUS``) on a host without them keeps its
    indices, which nothing enumerates."""
    if not launch.gpus or not os.path.exists("/dev/nvidiactl"):
        return launch
    inside = ",".join(str(i) for i in range(len(launch.gpus)))
    env = launch.env | {"CUDA_VISIBLE_DEVICES": inside}
    if "NVIDIA_VISIBLE_DEVICES" in env:
        env["NVIDIA_VISIBLE_DEVICES"] = inside
    return dataclasses.replace(launch, env=env)


#: After a worker's process group is gone its pipe reaches EOF at once; this long is only
#: waited for when something that escaped the group (its own session) still holds the pipe.
_DRAIN_SECONDS = 2.0
_CHUNK = 64 * 1024


def _kill_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_group(proc: asyncio.subprocess.Process | ForkedProcess, sig: signal.Signals) -> None:
    """A forked worker is signalled only while its pidfd says it lives (``forked.py``)."""
    if isinstance(proc, ForkedProcess):
        proc.signal_group(sig)
    else:
        _kill_group(proc.pid, sig)


async def copy_output(reader: asyncio.StreamReader, sink: LogSink) -> None:
    """Feed the worker's output to its log until EOF (the caller closes ``sink``). The
    StreamReader pauses the pipe when its buffer is full, so a worker writing faster than this
    copies, or than its log's pace allows, is slowed down rather than held in memory."""
    while chunk := await reader.read(_CHUNK):
        if hold := sink.feed(chunk):
            await asyncio.sleep(hold)


@dataclass(frozen=True, slots=True)
class _ZygoteGroups:
    """A provider's zygotes' cgroups (``fork_server.ZygoteGroups``), capped at ``caps``, named
    by ``numbers`` as its workers' are; blocking, OSError when they cannot be made."""

    cgroups: Cgroups
    caps: Caps
    numbers: Iterator[int]

    def own(self) -> Group:
        return self.cgroups.make(f"zygote.{next(self.numbers)}", self.caps)

    def parent(self) -> Group:
        return self.cgroups.make_parent(f"forks.{next(self.numbers)}")

    def settle(self, parent: Group) -> Group:
        return self.cgroups.settle(parent, f"zygote.{next(self.numbers)}", self.caps)


class LocalProvider:
    """``logs`` opens each worker's log (``WorkerLogs.sink``): where it lives and how it is
    kept are the logs service's."""

    def __init__(
        self,
        on_exit: ExitCallback,
        cwd: Path | None = None,
        *,
        logs: LogSinks,
        sandbox: Sandbox | None = None,
        fork_servers: bool = True,
        cgroups: Cgroups | None = None,
        pids_limit: int | None = None,
    ) -> None:
        """``cgroups``: where each worker gets a group of its own, capped at ``pids_limit``
        processes and its launch's memory and vCPUs (``cgroups.py``); None: no caps."""
        self._on_exit = on_exit
        self._cwd = cwd
        #: Numbers the groups made (a zygote's is made on a worker thread: ``next`` on a
        #: ``count`` is one step, where ``+= 1`` could hand two groups one name).
        self._group_numbers = numbers = itertools.count(1)
        zygote_caps = Caps(pids=pids_limit, memory_bytes=ZYGOTE_MEMORY_BYTES)
        #: None: the sandbox is off (``SKIFF_SANDBOX=off``), every worker runs as it is.
        self._sandbox = sandbox
        self._logs = logs
        self._procs: dict[str, asyncio.subprocess.Process | ForkedProcess] = {}
        #: Zygotes for the workers that can come out of one (``fork_server.py``): Linux only,
        #: since a forked worker's death with its parent is PDEATHSIG.
        self._forks = (
            ForkServers(
                self.host_environment(),
                cwd,
                _shim_prefix(),
                sandboxed=self._zygote_in_sandbox if sandbox is not None else None,
                groups=(
                    _ZygoteGroups(cgroups, zygote_caps, numbers) if cgroups is not None else None
                ),
            )
            if fork_servers and sys.platform == "linux"
            else None
        )
        self._watchers: set[asyncio.Task[None]] = set()
        #: Set once bwrap has been seen to mount a volume (a refusal is asked again next time).
        self._mounts_volumes = False
        self._served: dict[str, ServedAt] = {}
        self._cgroups = cgroups
        self._pids_limit = pids_limit
        #: Each running worker's cgroup, where it has one.
        self._groups: dict[str, Group] = {}

    def _caps(self, launch: Launch) -> Caps:
        return Caps(pids=self._pids_limit, memory_bytes=launch.memory_bytes, vcpus=launch.vcpus)

    def _key(self, launch: Launch) -> str:
        """A group's name for ``launch`` and this start (a restarted pod's next instance never
        shares the directory its last one's removal may still be at)."""
        return f"{launch.worker_id}.{next(self._group_numbers)}"

    async def _group(self, launch: Launch) -> Group | None:
        """A fresh cgroup for ``launch``."""
        if self._cgroups is None:
            return None
        try:
            return await asyncio.to_thread(
                self._cgroups.make, self._key(launch), self._caps(launch)
            )
        except OSError as exc:
            raise WorkerStartError(f"its cgroup could not be made: {exc}") from exc

    def _view(self, group: Group | None) -> View:
        """What a sandbox of a process in ``group`` shows of cgroups (``cgroups.view``)."""
        if self._cgroups is None:
            return cgroup_views.view(None)
        return self._cgroups.view(group)

    async def start(self, launch: Launch) -> int:
        # The user's alone, like the data directory it is in (datadir.py).
        make_private_dirs(launch.home)
        sink = self._logs(launch.endpoint_id, launch.worker_id, launch.user_id)
        # A pipe of our own rather than stdout=PIPE: asyncio's Process.wait() would then wait
        # for the pipe to close too, which a leftover child of the worker can hold open.
        read_fd, write_fd = os.pipe()
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_CHUNK, loop=loop)
        try:
            # Closed once, whichever loop runs it (read_pipes.py).
            transport = await connect_read_end(
                loop, read_fd, asyncio.StreamReaderProtocol(reader, loop=loop)
            )
        except BaseException:
            os.close(write_fd)
            sink.close()
            raise
        if launch.sandboxed and self._sandbox is not None:
            launch = _inside_numbering(launch)
        group: Group | None = None
        proc: asyncio.subprocess.Process | ForkedProcess
        try:
            forked = await self._forked(launch, write_fd)
            if forked is not None:
                proc, group = forked
            else:
                group = await self._group(launch)
                argv, env = _command(launch, self._sandbox, self._cwd, self._view(group))
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    env=joining(env, group),
                    cwd=launch.cwd or self._cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=write_fd,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except BaseException:
            transport.close()
            sink.close()
            if group is not None:
                await asyncio.to_thread(group.remove)
            raise
        finally:
            # Only the worker holds the write end now, so its exit is the pipe's EOF.
            os.close(write_fd)
        self._procs[launch.worker_id] = proc
        if group is not None:
            self._groups[launch.worker_id] = group
        if launch.serves is not None:
            # A process shares this host's network: it listens on the very ports it was given.
            self._served[launch.worker_id] = ServedAt(
                f"{LOOPBACK}:{launch.serves.port}", f"{LOOPBACK}:{launch.serves.health_port}"
            )
        pump = asyncio.create_task(self._pump(launch.worker_id, reader, transport, sink))
        task = asyncio.create_task(self._watch(launch.worker_id, proc, pump, sink, group))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)
        return proc.pid

    async def _forked(
        self, launch: Launch, log_fd: int
    ) -> tuple[ForkedProcess, Group | None] | None:
        """The worker forked from a zygote, and its cgroup, when it can come from one and one
        is ready: the shared zygote for a worker outside the sandbox without a volume, the
        zygote in its endpoint's sandbox for a sandboxed CPU worker (a GPU's device nodes are
        bound per worker when its sandbox is made) that binds no port of its own. Its group
        lies within its zygote's sandbox's (``cgroups.Cgroups.make_parent``), where the
        sandbox shows it."""
        if self._forks is None:
            return None
        if not (launch.sandboxed and self._sandbox is not None):
            plan = None if launch.volume is not None else forkable(launch)
        elif launch.gpus or launch.homes is None or (self._sandbox.fenced and _own_ports(launch)):
            # A zygote's fence lets its children bind no port of their own (``_in_sandbox``).
            return None
        else:
            spot = SandboxSpot(
                homes=str(launch.homes.resolve()),
                cwd=str((launch.cwd or self._cwd or Path.cwd()).resolve()),
                volume=str(launch.volume.resolve()) if launch.volume is not None else None,
                mount=launch.volume_mount,
                script="",  # forkable() fills it in
            )
            plan = forkable(launch, spot)
        if plan is None:
            return None
        cgroups = self._cgroups
        if cgroups is None:
            return await self._forks.fork(plan, launch, log_fd)
        key, caps = self._key(launch), self._caps(launch)
        return await self._forks.fork(
            plan, launch, log_fd, lambda under: cgroups.make(key, caps, under)
        )

    def _zygote_in_sandbox(
        self, key: ZygoteKey, argv: list[str], parent: Group | None
    ) -> list[str]:
        """A zygote's command in the sandbox of its key's endpoint: every worker's home
        writable, its volume mounted, no GPU; of cgroups, ``parent`` (its own and its workers'
        groups, made within it)."""
        spot = key.sandbox
        assert spot is not None and self._sandbox is not None
        command = self._sandbox.command(
            argv,
            home=Path(spot.homes),
            cwd=Path(spot.cwd),
            env=self.host_environment() | dict(key.python_env),
            volume=Path(spot.volume) if spot.volume is not None else None,
            mount=spot.mount,
            reach=[spot.script],
            cgroups=self._view(parent),
        )
        # Its workers' fence, with no port of their own: a worker that serves is not forked.
        return _in_sandbox(command, self._sandbox)

    @staticmethod
    async def _pump(
        worker_id: str,
        reader: asyncio.StreamReader,
        transport: asyncio.ReadTransport,
        sink: LogSink,
    ) -> None:
        try:
            await copy_output(reader, sink)
        except Exception:
            log.exception("copying the output of worker %s failed", worker_id)
            # Keep emptying the pipe: a full one would block the worker on its next print.
            while await reader.read(_CHUNK):
                pass
        finally:
            transport.close()

    async def _watch(
        self,
        worker_id: str,
        proc: asyncio.subprocess.Process | ForkedProcess,
        pump: asyncio.Task[None],
        sink: LogSink,
        group: Group | None,
    ) -> None:
        code = await proc.wait()
        # The leader is gone; end whatever it left in its group (the SDK's heartbeat process),
        # and in its cgroup whatever left that group to outlive it. A forked worker's group was
        # ended as its pidfd said it had ended (``forked.py``): by the time its zygote's report
        # is given up on, its number may be another process's.
        if not isinstance(proc, ForkedProcess):
            _kill_group(proc.pid, signal.SIGKILL)
        over_memory: str | None = None
        if group is not None:
            if self._groups.get(worker_id) is group:
                del self._groups[worker_id]
            over_memory = await asyncio.to_thread(group.memory_exceeded)
            await asyncio.to_thread(group.remove)
        self._procs.pop(worker_id, None)
        self._served.pop(worker_id, None)
        # Report the exit only once the log holds the worker's last lines, so whoever handles
        # it (or asks for the log) sees why it ended.
        done, _ = await asyncio.wait({pump}, timeout=_DRAIN_SECONDS)
        if not done:
            pump.cancel()
            await asyncio.wait({pump})
        if over_memory is not None:
            # Else a SIGKILL from nowhere: the kernel's reason, where its owner reads the rest.
            sink.feed(f"\n[skiff] {over_memory}\n".encode())
        # The last line of a worker that died mid-line is kept too.
        sink.close()
        try:
            await self._on_exit(worker_id, code)
        except Exception:
            log.exception("handling the exit of worker %s failed", worker_id)

    async def stop(self, worker_id: str, grace: float) -> None:
        proc = self._procs.get(worker_id)
        if proc is None or proc.returncode is not None:
            return
        _signal_group(proc, signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(proc.wait())
        except TimeoutError:
            _signal_group(proc, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await asyncio.shield(proc.wait())

    async def stop_all(self, grace: float) -> None:
        await asyncio.gather(*(self.stop(w, grace) for w in list(self._procs)))
        # Let the watchers report the exits before the store closes.
        if self._watchers:
            await asyncio.wait(set(self._watchers), timeout=5)
        if self._forks is not None:
            await self._forks.close()
        if self._cgroups is not None:
            await asyncio.to_thread(self._cgroups.close)

    @property
    def fork_servers(self) -> ForkServers | None:
        return self._forks

    def running(self) -> list[str]:
        return list(self._procs)

    def served_at(self, worker_id: str) -> ServedAt | None:
        return self._served.get(worker_id)

    #: A process runs the template's command on the host; its ``imageName`` is not used.
    runs_images = False
    slow_starts = False

    def worker_url(self, base_url: str) -> str:
        return base_url

    def entry_command(self, launch: Launch) -> tuple[list[str], dict[str, str]]:
        """The command line and environment ``launch`` starts with, for a process started
        beside a running one (a session in a pod: ``local_pods.py``): the same sandbox, GPUs,
        home and volume, its process group its own."""
        if launch.sandboxed and self._sandbox is not None:
            launch = _inside_numbering(launch)
        # In the cgroup of the process it is started beside: within its caps, ended with it.
        group = self._groups.get(launch.worker_id)
        argv, env = _command(launch, self._sandbox, self._cwd, self._view(group))
        return argv, joining(env, group)

    def host_environment(self) -> dict[str, str]:
        """With the sandbox: only what a program needs of the host to run (``SANDBOX_INHERITS``),
        since the server's environment may hold its own credentials (a database password, a
        cloud key) that are no tenant's business. Without it: the server's environment minus
        its secrets (``SKIFF_*``) and any ``RUNPOD_*``."""
        if self._sandbox is not None:
            return {k: v for k, v in os.environ.items() if k.startswith(SANDBOX_INHERITS)}
        return {k: v for k, v in os.environ.items() if not k.startswith(("SKIFF_", "RUNPOD_"))}

    async def volume_mount_problem(self) -> str | None:
        """Through bwrap, tried for real the first time (``bubblewrap.problem``)."""
        if self._mounts_volumes:
            return None
        problem = await bubblewrap.problem()
        self._mounts_volumes = problem is None
        return problem

    async def sandbox_problem(self) -> str | None:
        """Why a sandbox cannot be made here (tried for real, ``Sandbox.problem``); None when
        it can, or when it is off."""
        if self._sandbox is None:
            return None
        return await self._sandbox.problem()

    def kill_leftover(self, worker_id: str, pid: int) -> bool:
        """Only a process that really is that worker: its environment names the worker id,
        so a recycled pid of an unrelated process is never touched."""
        try:
            environ = environ_of(pid)
        except OSError:
            return _kill_group(pid, signal.SIGKILL) if _group_exists(pid) else False
        if f"RUNPOD_POD_ID={worker_id}".encode() not in environ.split(b"\0"):
            return False
        return _kill_group(pid, signal.SIGKILL)


#: How long a process caught in an ``execve`` is waited for: its environment reads empty until
#: the new program's is laid out (the shim execs bwrap, bwrap the worker).
_EXEC_WAIT_SECONDS = 0.1


def environ_of(pid: int) -> bytes:
    """The environment ``pid`` started its program with. Read again while it is empty and the
    process lives: a worker's never is (it holds the worker's id) but in the middle of an exec.
    A zombie's, or a kernel thread's that took the pid over, stays empty: not waited out."""
    deadline = time.monotonic() + _EXEC_WAIT_SECONDS
    while not (environ := Path(f"/proc/{pid}/environ").read_bytes()):
        if time.monotonic() >= deadline or _ended_or_kernel(pid):
            break
        time.sleep(0.002)
    return environ


def _ended_or_kernel(pid: int) -> bool:
    """A zombie, or a kernel thread (``PF_KTHREAD`` in its flags): no program of a user's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0] in ("Z", "X") or bool(int(fields[6]) & 0x00200000)


def _group_exists(pgid: int) -> bool:
    """A group whose leader is gone may still have members (the heartbeat process)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
