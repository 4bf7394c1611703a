"""Fork servers ("zygotes") for local workers: a cold start without ``import runpod``.

Most of a worker's cold start is its Python importing the SDK (about 1.7 s of 1.9 here, most
of it the SDK's processor probe). A zygote is the worker's own interpreter started once with
the SDK imported (``zygote_main.py``); each worker after that is a ``fork()`` of it that takes
on the worker's environment, working directory, arguments and log pipe and then runs its script
as ``python script.py`` would. The worker is in a session (process group) of its own, dies
with the zygote, which dies with the server (PDEATHSIG), and is stopped, logged and reported
exactly as a process started the plain way (``local.py``).

Which workers: a command ``python[3[.N]] [-u] script.py args...``, from one of two kinds of
zygote (anything else, ``-m module``, a shell, another program, starts the plain way):

- Outside the sandbox, without a network volume: one zygote per interpreter, its flags and its
  ``PYTHON*`` environment (``PYTHONPATH`` shapes what the SDK imports), shared by every
  endpoint; it is started on the first worker that could use it, which itself starts the plain
  way, so nothing ever waits for a zygote.
- In the sandbox, a CPU worker: one zygote per endpoint (its ``SandboxSpot``: the directory of
  its workers' homes, working directory, volume and script, besides the interpreter), started
  by bubblewrap as the endpoint's workers are. A sandbox's namespaces and mounts are made when
  bubblewrap starts its first process, so the zygote's sandbox binds the directory of all the
  endpoint's homes (each forked worker finds its own in it), no GPU device node (a GPU
  worker starts the plain way), and of cgroups a group made for the zygote and its workers
  (``ZygoteGroups.parent``; ``cgroups.py``), in which its sandbox's cgroup namespace starts:
  bwrap first runs ``_SETTLE_GATE``, which waits until the server has moved it into its own
  capped group within (``settle``) before the zygote's interpreter runs, and each worker is
  moved into a group of its own beside it. It is started ``SANDBOXED_START_SECONDS`` after
  the endpoint's first worker, not at once (its import would slow that worker's own start),
  and only if the endpoint still exists then; the next worker start anywhere ends it once it
  has had no worker for ``IDLE_SECONDS`` or its endpoint is gone; at most ``MAX_SANDBOXED``
  run at once.
  Inside, processes are numbered by the sandbox's PID namespace: each forked worker tells the
  server it exists itself, and the server takes its pid on the host from the message's
  credentials (``SO_PASSCRED``), and holds it by a pidfd from then on (``forked.py``), so it
  stops and watches it as any other. What a zygote says is checked like any tenant input (it
  shares its sandbox with the tenant's code, and imports the SDK from the tenant's path).

A zygote that cannot import the SDK (an interpreter without it) is not asked again for
``RETRY_SECONDS``.

What a forked worker shares with the zygote, and a fresh one would not: the modules the SDK
imports (aiohttp, requests, ...) were imported under the zygote's environment (the server's,
as ``LocalProvider.host_environment`` gives it), so a setting they read at import time comes
from there; and Python's string-hash seed. ``random`` is reseeded in every child by Python
itself. A worker's own modules, its handler's included, are imported in the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import orjson

from skiff.providers.base import Launch
from skiff.providers.cgroups import Group, joining
from skiff.providers.forked import ForkedProcess, open_pidfd

log = logging.getLogger(__name__)

#: After a zygote could not start, how long its interpreter's workers start the plain way.
RETRY_SECONDS = 300.0
#: How long a fork may take before the zygote is taken for broken.
_FORK_SECONDS = 10.0
#: How long a zygote may take to import the SDK.
_READY_SECONDS = 120.0
_PACKET = 1 << 20
#: ``struct ucred``: pid, uid, gid.
_CREDS = struct.Struct("3i")
#: How long a sandboxed zygote is kept with no worker: an endpoint that scaled to zero within
#: it starts its next worker forked.
IDLE_SECONDS = 1800.0
#: How long after its endpoint's first worker started a sandboxed zygote is started: not at
#: once, where its import of the SDK would slow that worker's own cold start on a busy CPU,
#: and not at all for an endpoint deleted by then.
SANDBOXED_START_SECONDS = 3.0
#: The most sandboxed zygotes at once (each holds an interpreter with the SDK imported, tens of
#: megabytes): a new one ends the one idle longest, or is not started while all are in use.
MAX_SANDBOXED = 16
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_SOURCE = (Path(__file__).parent / "zygote_main.py").read_text()


@dataclass(frozen=True, slots=True)
class SandboxSpot:
    """Where a sandboxed zygote runs: the sandbox of one endpoint's workers, whose homes all lie
    in ``homes`` (bound read-write, so that a worker forked later finds its own there), with
    the endpoint's network volume at ``mount`` and ``cwd`` as the working directory."""

    homes: str
    cwd: str
    volume: str | None
    mount: str
    #: The worker's script: the sandbox shows it as it would to the worker started plainly
    #: (a script under ``/tmp`` is bound in only when named).
    script: str


@dataclass(frozen=True, slots=True)
class ZygoteKey:
    """What a zygote's interpreter is started with: its workers must be started with the same.
    ``sandbox``: None for the zygote outside any sandbox, which any tenant's unsandboxed worker
    may come out of; else the endpoint's sandbox it runs in."""

    interpreter: str
    python_env: tuple[tuple[str, str], ...]
    sandbox: SandboxSpot | None = None


#: How a sandboxed zygote is started: its command (``argv``) inside its key's sandbox, which
#: shows it the cgroup it starts in (``ZygoteGroups.parent``; None: it has none).
SandboxCommand = Callable[["ZygoteKey", list[str], Group | None], list[str]]
#: Moves a forked worker (its pid on this host) where it belongs before it runs: its cgroup.
Place = Callable[[int], None]
#: Makes a forked worker's cgroup (blocking; OSError when it cannot), within the group its
#: zygote's sandbox shows (``ZygoteGroups.parent``) where it has one.
WorkerGroup = Callable[[Group | None], Group]


class ZygoteGroups(Protocol):
    """Makes zygotes' cgroups (``local.py``, through ``cgroups.py``). Each call blocks, and
    raises OSError when it cannot: then that zygote is not started."""

    def own(self) -> Group:
        """A capped group of its own, which a zygote outside any sandbox joins at its start."""
        ...

    def parent(self) -> Group:
        """An empty group for a sandboxed zygote and its workers, which the zygote joins at its
        start: its sandbox's cgroup namespace starts there, and the sandbox shows it."""
        ...

    def settle(self, parent: Group) -> Group:
        """The zygote's own capped group within ``parent``, its processes moved in."""
        ...


#: What a sandboxed zygote with a cgroup runs first, inside its sandbox and before its own
#: interpreter (which may run the tenant's code at its start): it says it is there, once bwrap
#: has made the cgroup namespace, and waits until the server has moved it into its capped group
#: (``ZygoteGroups.settle``).
_SETTLE_GATE = (
    "import os,socket,sys\n"
    "s=socket.socket(fileno=int(os.environ['SKIFF_ZYGOTE_FD']))\n"
    "s.send(b'settle')\n"
    "s.recv(16)==b'go' or sys.exit('skiff: the fork server was not moved into its cgroup')\n"
    "s.detach()\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


@dataclass(frozen=True, slots=True)
class Forkable:
    """A launch a zygote can start: its key and the worker's ``sys.argv`` (script first)."""

    key: ZygoteKey
    argv: list[str]
    unbuffered: bool


def forkable(launch: Launch, sandbox: SandboxSpot | None = None) -> Forkable | None:
    """``python [-u] script.py args...``, the interpreter found on the worker's ``PATH``; from
    the zygote of ``sandbox`` when given."""
    argv = launch.argv
    if len(argv) < 2 or not _PYTHON.fullmatch(os.path.basename(argv[0])):
        return None
    rest = argv[1:]
    unbuffered = False
    if rest[0] == "-u":
        unbuffered, rest = True, rest[1:]
    if not rest or rest[0].startswith("-") or not rest[0].endswith(".py"):
        return None
    interpreter = shutil.which(argv[0], path=launch.env.get("PATH"))
    if interpreter is None:
        return None
    python_env = tuple(
        sorted(
            (k, v)
            for k, v in launch.env.items()
            if k.startswith("PYTHON") and k != "PYTHONUNBUFFERED"
        )
    )
    if sandbox is not None:
        sandbox = replace(sandbox, script=os.path.abspath(os.path.join(sandbox.cwd, rest[0])))
    key = ZygoteKey(os.path.abspath(interpreter), python_env, sandbox)
    return Forkable(key, rest, unbuffered)


def _sender_pid(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The sending process's pid in this server's PID namespace, from ``SCM_CREDENTIALS``."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _uid, _gid = struct.unpack("3i", data[: _CREDS.size])
            return int(pid)
    return None


async def _receive(sock: socket.socket) -> tuple[bytes, int | None]:
    """One packet and its sender's pid (``asyncio`` has no ``recvmsg`` of its own)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, ancdata, _flags, _addr = sock.recvmsg(_PACKET, socket.CMSG_SPACE(_CREDS.size))
        except BlockingIOError:
            readable: asyncio.Future[None] = loop.create_future()

            def wake(waiter: asyncio.Future[None] = readable) -> None:
                if not waiter.done():
                    waiter.set_result(None)

            loop.add_reader(sock.fileno(), wake)
            try:
                await readable
            finally:
                loop.remove_reader(sock.fileno())
            continue
        return data, _sender_pid(ancdata)


@dataclass(frozen=True, slots=True)
class _Start:
    """What every zygote of a provider is started with (``ForkServers``)."""

    env: dict[str, str]
    cwd: Path | None
    groups: ZygoteGroups | None


class _Zygote:
    def __init__(self, key: ZygoteKey, start: _Start) -> None:
        self.key = key
        self._start = start
        #: Its cgroup, while it has one (removed once it has ended).
        self.group: Group | None = None
        #: In a sandbox: the group its sandbox shows, its own and its workers' within.
        self.parent: Group | None = None
        self.ready = False
        self.failed_at: float | None = None
        self._sock: socket.socket | None = None
        self._proc: asyncio.subprocess.Process | None = None
        #: Forks asked for and not yet announced by their worker, by token.
        self._waiting: dict[int, asyncio.Future[ForkedProcess]] = {}
        self._tokens = 0
        #: Its live workers by the pid the zygote knows them by (its own namespace's).
        self._children: dict[int, ForkedProcess] = {}
        self._idle_since = 0.0
        self.task: asyncio.Task[None] | None = None

    def idle_for(self, now: float) -> float:
        """How long it has had no worker and no fork under way (0 while it has)."""
        return 0.0 if self._children or self._waiting else now - self._idle_since

    async def run(self, command: Callable[[Group | None], list[str]]) -> None:
        """Start the zygote (``command``, given the group its sandbox shows, runs ``python -c
        SOURCE``) and serve its messages until it ends."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Every packet then carries its sender's pid as this server numbers processes.
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        env = self._start.env | dict(self.key.python_env)
        env["SKIFF_ZYGOTE_FD"] = str(theirs.fileno())
        self._sock = ours
        try:
            try:
                groups = self._start.groups
                # Before it starts: the shim joins it before the interpreter runs.
                if groups is not None and self.key.sandbox is not None:
                    self.parent = await asyncio.to_thread(groups.parent)
                elif groups is not None:
                    self.group = await asyncio.to_thread(groups.own)
                self._proc = await asyncio.create_subprocess_exec(
                    *command(self.parent),
                    env=joining(env, self.parent or self.group),
                    cwd=self._start.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
            finally:
                theirs.close()
            ours.setblocking(False)
            async with asyncio.timeout(_READY_SECONDS):
                if self.parent is not None:
                    await self._settle(ours, self.parent)
                first, _sender = await _receive(ours)
            message = orjson.loads(first) if first else {"error": "it exited"}
            if not message.get("ready"):
                log.warning(
                    "workers of %s start without a fork server: %s",
                    self.key.interpreter,
                    message.get("error"),
                )
                self.failed_at = loop.time()
                return
            self.ready = True
            self._idle_since = loop.time()
            where = f" in the sandbox of {self.key.sandbox.homes}" if self.key.sandbox else ""
            log.info("the fork server of %s%s is ready", self.key.interpreter, where)
            while True:
                packet, sender = await _receive(ours)
                if not packet:
                    break
                self._on_message(packet, sender)
        except (OSError, TimeoutError, orjson.JSONDecodeError) as exc:
            log.warning("the fork server of %s ended: %s", self.key.interpreter, exc)
        finally:
            self.ready = False
            if self.failed_at is None:
                self.failed_at = loop.time()
            await self._end()

    async def _settle(self, sock: socket.socket, parent: Group) -> None:
        """Once the zygote's sandbox is made (its cgroup namespace starting at ``parent``),
        move it into its own capped group within (``_SETTLE_GATE``), then let it go on."""
        said, _sender = await _receive(sock)
        if said != b"settle":
            raise OSError(f"it said {said[:40]!r} before it was moved into its cgroup")
        assert self._start.groups is not None
        self.group = await asyncio.to_thread(self._start.groups.settle, parent)
        sock.send(b"go")

    def _on_message(self, packet: bytes, sender: int | None) -> None:
        # A sandboxed zygote shares its sandbox with the tenant's workers, so what it says is
        # checked like any input: a malformed message is dropped, and a worker is known by the
        # pid the kernel vouches for, never by the one written in the message.
        try:
            message = orjson.loads(packet)
            if "forked" in message:
                self._on_forked(int(message["forked"]), int(message["pid"]), sender)
            elif "exited" in message:
                # Believed only of a worker that has ended (``forked.py``).
                exited = self._children.get(int(message["exited"]))
                if exited is not None:
                    exited.exited(int(message["code"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning("the fork server of %s said something unreadable: %s", self.key, exc)

    def _on_forked(self, token: int, inner: int, sender: int | None) -> None:
        if sender is None:
            raise ValueError("a fork announced without its sender's credentials")
        waiter = self._waiting.pop(token, None)
        try:
            # Taken while the worker waits at its gate: the pid is still its own.
            child = ForkedProcess(sender, open_pidfd(sender))
        except ProcessLookupError:
            if waiter is not None and not waiter.done():
                waiter.set_exception(OSError("the forked worker ended before it was adopted"))
            return
        if waiter is None or waiter.done():
            # Its caller gave up waiting (and started the worker the plain way).
            child.signal_group(signal.SIGKILL)
            return
        self._children[inner] = child
        child.on_end(lambda: self._forget(inner, child))
        waiter.set_result(child)

    def _forget(self, inner: int, child: ForkedProcess) -> None:
        if self._children.get(inner) is child:
            del self._children[inner]
            if not self._children:
                self._idle_since = asyncio.get_running_loop().time()

    async def fork(
        self, forkable: Forkable, launch: Launch, log_fd: int, place: Place | None = None
    ) -> ForkedProcess:
        """The worker, forked and announced. The child waits at a gate (a pipe) until it is
        adopted, and with ``place`` until ``place`` has been called with its pid, before
        anything of its own runs; when ``place`` fails the child is ended and the error
        raised."""
        assert self._sock is not None
        env = launch.env | ({"PYTHONUNBUFFERED": "1"} if forkable.unbuffered else {})
        self._tokens += 1
        token = self._tokens
        request = {
            "fork": token,
            "argv": forkable.argv,
            "env": env,
            "cwd": str(launch.cwd or self._start.cwd or "."),
        }
        waiter: asyncio.Future[ForkedProcess] = asyncio.get_running_loop().create_future()
        self._waiting[token] = waiter
        # Every child waits at a gate until its pidfd is open (``forked.py``), and with
        # ``place`` until it is placed.
        gate = os.pipe()
        try:
            try:
                # One packet (SOCK_SEQPACKET): it goes whole or not at all.
                socket.send_fds(self._sock, [orjson.dumps(request)], [log_fd, gate[0]])
            finally:
                os.close(gate[0])
            async with asyncio.timeout(_FORK_SECONDS):
                child = await waiter
            if place is not None:
                try:
                    place(child.pid)
                except OSError:
                    child.signal_group(signal.SIGKILL)
                    raise
            os.write(gate[1], b"g")
            return child
        except TimeoutError:
            # Taken for broken: ended, with whatever it forked (``run`` reports them).
            if self._proc is not None and self._proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
            raise
        finally:
            self._waiting.pop(token, None)
            os.close(gate[1])

    async def _end(self) -> None:
        """The zygote is gone: its workers die with it (PDEATHSIG); they are reported so."""
        if self._sock is not None:
            self._sock.close()
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(OSError("the fork server ended"))
        self._waiting.clear()
        for child in list(self._children.values()):
            child.signal_group(signal.SIGKILL)
            child.ends_with(-signal.SIGKILL)
        self._children.clear()
        # Its parent holds its own group and its workers': removed with them.
        made, self.group, self.parent = self.parent or self.group, None, None
        if made is not None:
            await asyncio.to_thread(made.remove)

    async def close(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        if self.task is not None:
            await asyncio.wait({self.task}, timeout=5)


class ForkServers:
    """The zygotes of one provider, one per ``ZygoteKey``.

    ``env``: what a zygote starts with (no tenant's variables: it is shared); ``argv_prefix``:
    what arms PDEATHSIG before the interpreter (``local.py``'s shim, which also joins the
    zygote's cgroup); ``sandboxed``: how a zygote is started in an endpoint's sandbox (None:
    sandboxed workers are never forked); ``groups``: makes a zygote's cgroups (``cgroups.py``;
    where it cannot, that zygote is not started, and its workers start the plain way, each in
    its own group); None: zygotes run in the server's."""

    def __init__(
        self,
        env: dict[str, str],
        cwd: Path | None,
        argv_prefix: list[str],
        sandboxed: SandboxCommand | None = None,
        groups: ZygoteGroups | None = None,
    ) -> None:
        self._starts_with = _Start(env, cwd, groups)
        self._argv_prefix = argv_prefix
        self._sandboxed = sandboxed
        self._zygotes: dict[ZygoteKey, _Zygote] = {}
        self._later: dict[ZygoteKey, asyncio.TimerHandle] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def _command(self, key: ZygoteKey, parent: Group | None) -> list[str]:
        argv = [key.interpreter, "-c", _SOURCE]
        if key.sandbox is None:
            return [*self._argv_prefix, *argv]
        assert self._sandboxed is not None
        if parent is not None:
            argv = [sys.executable, "-S", "-I", "-c", _SETTLE_GATE, *argv]
        return self._sandboxed(key, argv, parent)

    async def fork(
        self, forkable: Forkable, launch: Launch, log_fd: int, group: WorkerGroup | None = None
    ) -> tuple[ForkedProcess, Group | None] | None:
        """The worker forked from its zygote, and its cgroup made by ``group`` (the worker is
        moved into it before it runs: ``_Zygote.fork``); None when none is ready (one is
        started for the next worker when none runs), or the fork or its group failed, and the
        caller starts it the plain way."""
        loop = asyncio.get_running_loop()
        for idle in self._idle(loop.time()):
            self._end(idle)
        key = forkable.key
        zygote = self._zygotes.get(key)
        if zygote is None or (
            zygote.failed_at is not None and loop.time() - zygote.failed_at > RETRY_SECONDS
        ):
            if key.sandbox is None:
                self._start(key)
            elif key not in self._later:
                self._later[key] = loop.call_later(
                    SANDBOXED_START_SECONDS, self._start_if_wanted, key
                )
            return None
        if not zygote.ready:
            return None
        made: Group | None = None
        try:
            if group is not None:
                made = await asyncio.to_thread(group, zygote.parent)
            child = await zygote.fork(
                forkable, launch, log_fd, made.add if made is not None else None
            )
        except (OSError, TimeoutError) as exc:
            log.warning("forking a worker of %s failed: %s", forkable.key.interpreter, exc)
            if made is not None:
                await asyncio.to_thread(made.remove)
            return None
        return child, made

    def _start(self, key: ZygoteKey) -> None:
        zygote = self._zygotes[key] = _Zygote(key, self._starts_with)
        zygote.task = asyncio.create_task(zygote.run(lambda parent: self._command(key, parent)))

    def _start_if_wanted(self, key: ZygoteKey) -> None:
        self._later.pop(key, None)
        if key.sandbox is None or not Path(key.sandbox.homes).is_dir():
            return
        now = asyncio.get_running_loop().time()
        sandboxed = [k for k in self._zygotes if k.sandbox is not None and k != key]
        if len(sandboxed) >= MAX_SANDBOXED:
            idlest = max(sandboxed, key=lambda k: self._zygotes[k].idle_for(now))
            if self._zygotes[idlest].idle_for(now) == 0.0:
                return  # every one has workers: this endpoint's start the plain way
            self._end(idlest)
        self._start(key)

    def _end(self, key: ZygoteKey) -> None:
        """End a zygote in the background: a worker's start never waits for it."""
        task = asyncio.create_task(self._zygotes.pop(key).close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _idle(self, now: float) -> list[ZygoteKey]:
        """The sandboxed zygotes that have had no worker for ``IDLE_SECONDS``, or none and no
        endpoint any more (its homes removed): there is one per endpoint, each holding an
        interpreter's memory. The shared one stays."""
        idle: list[ZygoteKey] = []
        for key, zygote in self._zygotes.items():
            if key.sandbox is None or not zygote.ready or zygote.idle_for(now) == 0.0:
                continue
            if zygote.idle_for(now) > IDLE_SECONDS or not Path(key.sandbox.homes).is_dir():
                idle.append(key)
        return idle

    def ready(self, key: ZygoteKey) -> bool:
        """Whether the next worker of ``key`` comes out of its zygote."""
        zygote = self._zygotes.get(key)
        return zygote is not None and zygote.ready

    async def close(self) -> None:
        for later in self._later.values():
            later.cancel()
        self._later.clear()
        if self._closing:
            await asyncio.wait(set(self._closing), timeout=5)
        await asyncio.gather(*(z.close() for z in self._zygotes.values()))
        self._zygotes.clear()
