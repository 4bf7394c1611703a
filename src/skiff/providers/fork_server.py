"""Fork servers ("zygotes") for local workers: a cold start without ``import runpod``.

Most of a worker's cold start is its Python importing the SDK (about 1.7 s of 1.9 here, most
of it the SDK's processor probe). A zygote is the worker's own interpreter started once with
the SDK imported (``zygote_main.py``); each worker after that is a ``fork()`` of it that takes
on the worker's environment, working directory, arguments and log pipe and then runs its script
as ``python script.py`` would. The worker is in a session (process group) of its own, dies
with the zygote, which dies with the server (PDEATHSIG), and is stopped, logged and reported
exactly as a process started the plain way (``local.py``).

Which workers: a command ``python[3[.N]] [-u] script.py args...`` that is not in the sandbox and
has no network volume. The sandbox's namespaces, its per-worker home and GPU device nodes are
made when bwrap starts the process, so a sandboxed worker cannot come out of a shared parent:
it starts the plain way, as does anything else (``-m module``, a shell, another program).

One zygote per interpreter, its flags and its ``PYTHON*`` environment (``PYTHONPATH`` shapes
what the SDK imports); it is started on the first worker that could use it, which itself starts
the plain way, so nothing ever waits for a zygote. A zygote that cannot import the SDK (an
interpreter without it) is not asked again for ``RETRY_SECONDS``.

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
import subprocess
from dataclasses import dataclass
from pathlib import Path

import orjson

from skiff.providers.base import Launch

log = logging.getLogger(__name__)

#: After a zygote could not start, how long its interpreter's workers start the plain way.
RETRY_SECONDS = 300.0
#: How long a fork may take before the zygote is taken for broken.
_FORK_SECONDS = 10.0
#: How long a zygote may take to import the SDK.
_READY_SECONDS = 120.0
_PACKET = 1 << 20
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_SOURCE = (Path(__file__).parent / "zygote_main.py").read_text()


@dataclass(frozen=True, slots=True)
class ZygoteKey:
    """What a zygote's interpreter is started with: its workers must be started with the same."""

    interpreter: str
    python_env: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Forkable:
    """A launch a zygote can start: its key and the worker's ``sys.argv`` (script first)."""

    key: ZygoteKey
    argv: list[str]
    unbuffered: bool


def forkable(launch: Launch) -> Forkable | None:
    """``python [-u] script.py args...``, the interpreter found on the worker's ``PATH``."""
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
    return Forkable(ZygoteKey(os.path.abspath(interpreter), python_env), rest, unbuffered)


class ForkedProcess:
    """A worker forked by a zygote: what ``local.py`` uses of an ``asyncio`` process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = asyncio.get_running_loop().create_future()

    def exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._exited.set_result(code)

    async def wait(self) -> int:
        return int(await asyncio.shield(self._exited))


class _Zygote:
    def __init__(self, key: ZygoteKey, env: dict[str, str], cwd: Path | None) -> None:
        self.key = key
        self._env = env
        self._cwd = cwd
        self.ready = False
        self.failed_at: float | None = None
        self._sock: socket.socket | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._pids: asyncio.Queue[asyncio.Future[ForkedProcess]] = asyncio.Queue()
        self._children: dict[int, ForkedProcess] = {}
        self._lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None

    async def run(self, argv_prefix: list[str]) -> None:
        """Start the zygote and serve its messages until it ends."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = self._env | dict(self.key.python_env) | {"SKIFF_ZYGOTE_FD": str(theirs.fileno())}
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv_prefix,
                self.key.interpreter,
                "-c",
                _SOURCE,
                env=env,
                cwd=self._cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        try:
            first = await asyncio.wait_for(loop.sock_recv(ours, _PACKET), _READY_SECONDS)
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
            log.info("the fork server of %s is ready", self.key.interpreter)
            while packet := await loop.sock_recv(ours, _PACKET):
                self._on_message(orjson.loads(packet))
        except (OSError, TimeoutError, orjson.JSONDecodeError) as exc:
            log.warning("the fork server of %s ended: %s", self.key.interpreter, exc)
        finally:
            self.ready = False
            if self.failed_at is None:
                self.failed_at = loop.time()
            await self._end()

    def _on_message(self, message: dict[str, int]) -> None:
        if "pid" in message:
            child = ForkedProcess(message["pid"])
            self._children[child.pid] = child
            waiter = self._pids.get_nowait()
            if waiter.done():
                # Its caller gave up waiting (and started the worker the plain way).
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)
            else:
                waiter.set_result(child)
        elif "exited" in message:
            exited = self._children.pop(message["exited"], None)
            if exited is not None:
                exited.exited(message["code"])

    async def fork(self, forkable: Forkable, launch: Launch, log_fd: int) -> ForkedProcess:
        assert self._sock is not None
        env = launch.env | ({"PYTHONUNBUFFERED": "1"} if forkable.unbuffered else {})
        request = {"argv": forkable.argv, "env": env, "cwd": str(launch.cwd or self._cwd or ".")}
        async with self._lock:
            waiter = asyncio.get_running_loop().create_future()
            self._pids.put_nowait(waiter)
            # One packet (SOCK_SEQPACKET): it goes whole or not at all.
            socket.send_fds(self._sock, [orjson.dumps(request)], [log_fd])
        try:
            return await asyncio.wait_for(waiter, _FORK_SECONDS)
        except TimeoutError:
            # Taken for broken: ended, with whatever it forked (``run`` reports them).
            if self._proc is not None and self._proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
            raise

    async def _end(self) -> None:
        """The zygote is gone: its workers die with it (PDEATHSIG); they are reported so."""
        if self._sock is not None:
            self._sock.close()
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        while not self._pids.empty():
            waiter = self._pids.get_nowait()
            if not waiter.done():
                waiter.set_exception(OSError("the fork server ended"))
        for pid, child in list(self._children.items()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            child.exited(-signal.SIGKILL)
        self._children.clear()

    async def close(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        if self.task is not None:
            await asyncio.wait({self.task}, timeout=5)


class ForkServers:
    """The zygotes of one provider, one per ``ZygoteKey``.

    ``env``: what a zygote starts with (no tenant's variables: it is shared); ``argv_prefix``:
    what arms PDEATHSIG before the interpreter (``local.py``'s shim)."""

    def __init__(self, env: dict[str, str], cwd: Path | None, argv_prefix: list[str]) -> None:
        self._env = env
        self._cwd = cwd
        self._argv_prefix = argv_prefix
        self._zygotes: dict[ZygoteKey, _Zygote] = {}

    async def fork(self, forkable: Forkable, launch: Launch, log_fd: int) -> ForkedProcess | None:
        """The worker forked from its zygote; None when none is ready (one is started for the
        next worker when none runs), and the caller starts it the plain way."""
        loop = asyncio.get_running_loop()
        zygote = self._zygotes.get(forkable.key)
        if zygote is None or (
            zygote.failed_at is not None and loop.time() - zygote.failed_at > RETRY_SECONDS
        ):
            zygote = self._zygotes[forkable.key] = _Zygote(forkable.key, self._env, self._cwd)
            zygote.task = asyncio.create_task(zygote.run(self._argv_prefix))
            return None
        if not zygote.ready:
            return None
        try:
            return await zygote.fork(forkable, launch, log_fd)
        except (OSError, TimeoutError) as exc:
            log.warning("forking a worker of %s failed: %s", forkable.key.interpreter, exc)
            return None

    def ready(self, key: ZygoteKey) -> bool:
        """Whether the next worker of ``key`` comes out of its zygote."""
        zygote = self._zygotes.get(key)
        return zygote is not None and zygote.ready

    async def close(self) -> None:
        await asyncio.gather(*(z.close() for z in self._zygotes.values()))
        self._zygotes.clear()
