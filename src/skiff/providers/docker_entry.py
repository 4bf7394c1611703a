"""A session in a Docker pod: a ``docker exec`` in the pod's container, as a ``PodEntry``.

The exec runs with the container's own user, working directory and environment, plus the
session's variables; its shell is chosen inside the container (``entry_argv``). Its connection
is the daemon's hijacked HTTP connection, read and written on the server's loop (the docker
SDK's calls, which block, run in threads). Without a terminal the daemon sends the exec's
output and errors as frames (an 8-byte header: which stream, then the length), taken apart
here into ``read_output`` and ``read_errors``; on a terminal it sends the terminal's bytes as
they are.

Docker has no way to end an exec, and closing its connection ends nothing inside the container
(not even a terminal session's shell). So ``end`` hangs the session up itself, as a terminal's
hang-up would: a second exec sends SIGHUP to the session's first process's process group and
to its terminal's foreground group. It finds that process by the ``SKIFF_SESSION`` variable the
session starts with (the one whose parent is outside the container, as an exec's is), with the
image's ``tr`` and ``grep``. What was started to outlive a hang-up (``nohup``, ``setsid``,
tmux) goes on, as after an SSH session; everything ends with the container, so a pod's stop or
restart ends its sessions.

The connection is only read this way from a daemon on its unix socket or plain TCP
(``DOCKER_HOST``); over TLS or SSH, sessions are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shlex
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from docker.errors import DockerException, NotFound  # type: ignore[import-untyped]

from skiff.domain.pod_sessions import EntryRequest, TerminalSize
from skiff.providers.base import EntryRefused
from skiff.providers.pod_entry import CHUNK, ENVIRONMENT_FILE, environment_lines, shell_argv

log = logging.getLogger(__name__)

#: Chooses a session's shell inside the container (``shell_argv`` looks on the host, which
#: says nothing of the image): bash where the image has it, which the runpod CLI's commands
#: need (``source``), else the POSIX shell. Given the shell's arguments.
CONTAINER_SHELL = 'if [ -x /bin/bash ]; then exec /bin/bash "$@"; fi; exec /bin/sh "$@"'

#: Each session's processes carry its id in this variable: how ``end`` finds them.
SESSION_VARIABLE = "SKIFF_SESSION"

#: Run with a session's id: SIGHUP to the process group of the session's first process (an
#: exec's parent is outside the container: PPid 0) and to its terminal's foreground group.
HANG_UP = f"""for d in /proc/[0-9]*; do
  tr '\\0' '\\n' 2>/dev/null <"$d/environ" | grep -qxF "{SESSION_VARIABLE}=$1" || continue
  stat=$(cat "$d/stat" 2>/dev/null) || continue
  set -- "$1" ${{stat##*') '}}
  [ "$3" = 0 ] || continue
  kill -s HUP -- "-${{d#/proc/}}"
  [ "$7" -gt 0 ] && kill -s HUP -- "-$7"
done
"""

#: Run before a container's first session, its input the pod's environment: the hosted
#: platform's ``/etc/rp_environment`` and the ``/root/.bashrc`` that the runpod CLI's commands
#: source, each only where the image has none (``set -C``: not over one made meanwhile either).
PREPARE = (
    "umask 077; set -C; "
    f"[ -e {shlex.quote(ENVIRONMENT_FILE)} ] || cat >{shlex.quote(ENVIRONMENT_FILE)}; "
    "[ -e /root/.bashrc ] || [ ! -d /root ] || : >/root/.bashrc"
)

#: A frame's header, without a terminal: the stream (1 output, 2 errors, 3 the daemon's own
#: error), three zero bytes, the length.
_FRAME = struct.Struct(">BxxxL")
_OUTPUT = 1
#: What a terminal's EOF character is unless the session changed it (Ctrl-D).
_EOF = b"\x04"
#: How long ``wait`` waits for a session that was ended before reporting it hung up.
_HANG_UP_GRACE = 2.0
#: Its exit code then (128 + SIGHUP), and when its container went before it could be asked
#: (128 + SIGKILL: a stopped container's processes are killed).
_HUNG_UP = 129
_KILLED = 137
#: The daemon URLs (``APIClient.base_url``) whose connections are plain sockets.
_PLAIN = ("http+docker://localhost", "http://")


def entry_argv(request: EntryRequest) -> list[str]:
    """The exec's command for ``request``: its shell's arguments, given to the shell that
    ``CONTAINER_SHELL`` chooses."""
    _, *arguments = shell_argv(request)
    return ["/bin/sh", "-c", CONTAINER_SHELL, "sh", *arguments]


def container_environment(container_attrs: Mapping[str, Any]) -> dict[str, str]:
    """A container's environment as it was created (``Config.Env``: the image's and the
    pod's)."""
    env = (container_attrs.get("Config") or {}).get("Env") or []
    return dict(entry.split("=", 1) for entry in env if "=" in entry)


#: How long the preparation of a container for sessions may take.
PREPARE_SECONDS = 20


async def prepare(api: Any, container_id: str, env: Mapping[str, str]) -> None:
    """``PREPARE`` in the container, given ``env`` as ``/etc/rp_environment``'s lines; a
    failure (an image whose user cannot write ``/etc``) is only logged: sessions work
    without."""
    entry = await ExecEntry.start(api, container_id, ["/bin/sh", "-c", PREPARE], {}, None)
    try:
        # Bounded: a container whose tools hang (its tenant's to break) must not hold the
        # session's opening, nor this task, for ever.
        async with asyncio.timeout(PREPARE_SECONDS):
            await entry.write(environment_lines(dict(env)).encode())
            entry.close_input()
            errors, _ = await asyncio.gather(_all(entry.read_errors), _all(entry.read_output))
            code = await entry.wait()
    except TimeoutError:
        entry.end()
        log.info(
            "preparing container %s for sessions took over %d s", container_id, PREPARE_SECONDS
        )
        return
    if code != 0:
        log.info("preparing container %s for sessions failed (%d): %r", container_id, code, errors)


class _Stream:
    """One of the exec's outputs between the pump that fills it and the reader that drains
    it. The pump waits while it holds a chunk or more, as a process writing to a full pipe
    does."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._ended = False
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def feed(self, data: bytes) -> None:
        self._data += data
        self._readable.set()
        if len(self._data) >= CHUNK:
            self._room.clear()

    def end(self) -> None:
        """Nothing more comes; what is here is still read."""
        self._ended = True
        self._readable.set()

    async def room(self) -> None:
        await self._room.wait()

    async def read(self) -> bytes:
        while not self._data and not self._ended:
            self._readable.clear()
            await self._readable.wait()
        chunk = bytes(self._data[:CHUNK])
        del self._data[:CHUNK]
        if len(self._data) < CHUNK:
            self._room.set()
        return chunk


class ExecEntry:
    """A ``PodEntry`` that is a ``docker exec`` (started by ``start``)."""

    def __init__(
        self,
        api: Any,
        container_id: str,
        exec_id: str,
        session: str,
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        tty: bool,
        read_ahead: bytes,
    ) -> None:
        self._api = api
        self._container_id = container_id
        self._exec_id = exec_id
        self._session = session
        self._reader, self._writer = connection
        self._tty = tty
        self._output = _Stream()
        self._errors = _Stream()
        if tty:
            self._errors.end()  # a terminal's output holds its errors
        self._pump = asyncio.create_task(self._copy(read_ahead))
        self._exit: asyncio.Task[int] | None = None
        self._size: TerminalSize | None = None
        self._resizing: asyncio.Task[None] | None = None
        #: When ``end`` was called (the loop's time).
        self._ended_at: float | None = None

    @classmethod
    async def start(
        cls,
        api: Any,
        container_id: str,
        argv: list[str],
        env: Mapping[str, str],
        terminal: TerminalSize | None,
    ) -> ExecEntry:
        """``argv`` in the container (``api``: the SDK's ``APIClient``), with ``env`` on top
        of the container's own; on a terminal of that size when ``terminal`` is given."""
        if not str(api.base_url).startswith(_PLAIN):
            raise EntryRefused(
                "sessions in Docker pods need the Docker daemon on its unix socket or on plain "
                "TCP (DOCKER_HOST), not over TLS or SSH"
            )
        session = secrets.token_hex(16)
        tty = terminal is not None
        created = await asyncio.to_thread(
            api.exec_create,
            container_id,
            argv,
            stdin=True,
            tty=tty,
            environment={**env, SESSION_VARIABLE: session},
        )
        exec_id = created["Id"]
        hijacked = await asyncio.to_thread(api.exec_start, exec_id, socket=True, tty=tty)
        # The connection comes as the ``SocketIO`` the HTTP client read it through.
        sock = getattr(hijacked, "_sock", hijacked)
        try:
            sock.setblocking(False)
            read_ahead = _read_ahead(hijacked)
            # Let go of it: while it is open, closing the socket would not close the connection.
            hijacked.close()
            connection = await asyncio.open_connection(sock=sock)
        except BaseException:
            hijacked.close()
            sock.close()
            raise
        entry = cls(api, container_id, exec_id, session, connection, tty, read_ahead)
        if terminal is not None:
            entry.resize(terminal)
        return entry

    async def _copy(self, read_ahead: bytes) -> None:
        """The connection's bytes into the two streams, until the daemon ends it (the exec's
        output has ended) or ``end`` closes it."""
        pending = bytearray(read_ahead)
        try:
            while True:
                self._deliver(pending)
                await self._output.room()
                await self._errors.room()
                chunk = await self._reader.read(CHUNK)
                if not chunk:
                    return
                pending += chunk
        except OSError as exc:  # the daemon went
            log.info("the session's connection to exec %s broke: %s", self._exec_id, exc)
        finally:
            self._output.end()
            self._errors.end()
            self._writer.close()

    def _deliver(self, pending: bytearray) -> None:
        if self._tty:
            if pending:
                self._output.feed(bytes(pending))
                pending.clear()
            return
        while len(pending) >= _FRAME.size:
            stream, length = _FRAME.unpack_from(pending)
            end = _FRAME.size + length
            if len(pending) < end:
                return
            if length:
                (self._output if stream == _OUTPUT else self._errors).feed(
                    bytes(pending[_FRAME.size : end])
                )
            del pending[:end]

    async def read_output(self) -> bytes:
        return await self._output.read()

    async def read_errors(self) -> bytes:
        return await self._errors.read()

    async def write(self, data: bytes) -> None:
        if self._resizing is not None and not self._resizing.done():
            # What is typed after a resize is read at the new size, as on a local terminal.
            await asyncio.shield(self._resizing)
        if self._writer.is_closing():
            return  # the session is over: what is typed goes nowhere
        with contextlib.suppress(ConnectionError):
            self._writer.write(data)
            await self._writer.drain()

    def close_input(self) -> None:
        if self._writer.is_closing():
            return
        with contextlib.suppress(OSError):
            if self._tty:
                # Closing a terminal exec's input ends its output, not its shell.
                self._writer.write(_EOF)
            else:
                self._writer.write_eof()

    def resize(self, size: TerminalSize) -> None:
        if not self._tty:
            return
        self._size = size
        # One resize at a time, the latest size last: threads would apply them in any order.
        if self._resizing is None or self._resizing.done():
            self._resizing = asyncio.create_task(self._apply_size())

    async def _apply_size(self) -> None:
        applied = None
        while self._size is not None and self._size != applied:
            applied = self._size
            try:
                await asyncio.to_thread(
                    self._api.exec_resize,
                    self._exec_id,
                    height=max(1, applied.rows),
                    width=max(1, applied.cols),
                )
            except (DockerException, OSError) as exc:  # it has ended, or the daemon has
                log.debug("resizing exec %s failed: %s", self._exec_id, exc)
                return

    async def wait(self) -> int:
        if self._exit is None:
            self._exit = asyncio.create_task(self._exit_code())
        return await asyncio.shield(self._exit)

    async def _exit_code(self) -> int:
        """Asked of the daemon once the output has ended (until then the exec runs), again
        while the daemon still counts it running."""
        await asyncio.wait({self._pump})
        loop = asyncio.get_running_loop()
        delay = 0.02
        while True:
            try:
                found = await asyncio.to_thread(self._api.exec_inspect, self._exec_id)
            except NotFound:
                return _KILLED  # its container was removed: it went with it
            except (DockerException, OSError) as exc:  # the daemon went
                log.info("the exit code of exec %s is unknown: %s", self._exec_id, exc)
                return _KILLED
            if not found.get("Running"):
                code = found.get("ExitCode")
                return _KILLED if code is None else int(code)
            if self._ended_at is not None and loop.time() - self._ended_at >= _HANG_UP_GRACE:
                return _HUNG_UP  # it outlives the hang-up (it ignores SIGHUP)
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)

    def end(self) -> None:
        if self._ended_at is not None:
            return
        loop = asyncio.get_running_loop()
        self._ended_at = loop.time()
        # Its output ends here (what came before is still read); the hang-up follows.
        self._writer.transport.abort()
        loop.run_in_executor(None, self._hang_up)

    def _hang_up(self) -> None:
        """``HANG_UP`` for this session, unless it has ended (a thread's work: the SDK
        blocks)."""
        try:
            if not self._api.exec_inspect(self._exec_id).get("Running"):
                return
            created = self._api.exec_create(
                self._container_id, ["/bin/sh", "-c", HANG_UP, "sh", self._session]
            )
            self._api.exec_start(created["Id"], detach=True)
        except (DockerException, OSError) as exc:  # the container or the daemon went: so did it
            log.debug("hanging up exec %s failed: %s", self._exec_id, exc)


def _read_ahead(hijacked: Any) -> bytes:
    """What the SDK's HTTP client read past the headers of the exec's start, and so is not in
    the socket any more: the stream's beginning, when the command wrote before the headers
    were read (the daemon starts it right after sending them). Its socket is non-blocking."""
    try:
        reader = hijacked._response.raw._fp.fp
        held: bytes = reader.peek()
        return reader.read(len(held)) if held else b""
    except (AttributeError, OSError, ValueError):
        return b""


async def _all(read: Callable[[], Awaitable[bytes]]) -> bytes:
    out = b""
    while chunk := await read():
        out += chunk
    return out
