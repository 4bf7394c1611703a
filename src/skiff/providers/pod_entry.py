"""Getting into a running pod: a process started inside it, as a user's SSH session or console
terminal asks (``services/pod_shells.py`` decides who may; the providers start it).

``EntryRequest`` (domain/pod_sessions.py) says what to run: a login shell or a command, on a
terminal of a given size or on plain pipes. ``PodEntry`` (providers/base.py) is the running
process as bytes in and out, the same whether it is a process in the pod's sandbox
(``ProcessEntry`` here, local pods) or a ``docker exec`` in the pod's container
(``providers/docker_entry.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import shlex
import signal
import struct
import subprocess
import termios
from collections.abc import Mapping

from attrs import define, field

from skiff.domain.pod_sessions import SFTP_COMMAND, EntryRequest, TerminalSize
from skiff.providers.base import EntryRefused, PodEntry
from skiff.providers.read_pipes import connect_read_end

__all__ = [
    "ENVIRONMENT_FILE",
    "SFTP_COMMAND",
    "EntryRefused",
    "EntryRequest",
    "PodEntry",
    "ProcessEntry",
    "TerminalSize",
    "environment_lines",
    "shell_argv",
]

#: Read at most this much of a process's output at a time.
CHUNK = 64 * 1024

#: The program a session's command line is given to, as sshd gives it to the user's shell:
#: bash, which the runpod CLI's commands need (``source``), else the POSIX shell.
SHELLS = ("/bin/bash", "/bin/sh")

#: Run in the pod before a terminal session's shell: its own session, with the terminal as its
#: controlling one, so that job control and Ctrl-C work as on any terminal.
CONTROLLING_TERMINAL_SHIM = (
    "import fcntl,os,sys,termios\n"
    "os.setsid()\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


#: Where the hosted platform's pods keep their environment as shell ``export`` lines.
ENVIRONMENT_FILE = "/etc/rp_environment"


def environment_lines(env: dict[str, str]) -> str:
    """``ENVIRONMENT_FILE``'s text: each variable as a quoted ``export`` line."""
    return "".join(
        f"export {name}={shlex.quote(value)}\n"
        for name, value in sorted(env.items())
        if name.isidentifier()
    )


def shell_argv(request: EntryRequest, shells: tuple[str, ...] = SHELLS) -> list[str]:
    """The argv that runs ``request`` with the first of ``shells`` a pod has (looked for on
    the host, whose ``/bin`` a local pod sees)."""
    shell = next((s for s in shells if os.access(s, os.X_OK)), shells[-1])
    if request.command is None:
        return [shell, "-l"]
    return [shell, "-c", request.command]


@define(eq=False, repr=False, slots=False)
class ProcessEntry:
    """A ``PodEntry`` that is a local process group (a local pod's sandbox, started by
    ``start``)."""

    _proc: asyncio.subprocess.Process
    #: The terminal's master side (non-blocking, as the reader's duplicate of it makes it);
    #: None on pipes, and once the process has ended and it is closed.
    _master: int | None
    _terminal: asyncio.StreamReader | None = field(alias="terminal_output")
    #: A write waiting for the terminal to take more input, woken when it is closed.
    _writable: asyncio.Future[None] | None = field(init=False, default=None)

    @classmethod
    async def start(
        cls,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: str | None,
        terminal: TerminalSize | None,
    ) -> ProcessEntry:
        """``argv`` in a process group (a session) of its own; on a new terminal of that size
        when ``terminal`` is given, run through ``CONTROLLING_TERMINAL_SHIM`` by the caller."""

        async def spawn(stdio: int) -> asyncio.subprocess.Process:
            """The process, ``stdio`` (pipes, or the terminal's slave side) its three streams."""
            return await asyncio.create_subprocess_exec(
                *argv,
                env=dict(env),
                cwd=cwd,
                stdin=stdio,
                stdout=stdio,
                stderr=stdio,
                start_new_session=True,
            )

        if terminal is None:
            return cls(await spawn(subprocess.PIPE), None, None)
        master, slave = os.openpty()
        try:
            fcntl.ioctl(master, termios.TIOCSWINSZ, _packed(terminal))
            proc = await spawn(slave)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=CHUNK, loop=loop)
        # A duplicate the transport owns and closes once (read_pipes.py); ``_master`` stays for
        # writes and sizes.
        await connect_read_end(
            loop, os.dup(master), asyncio.StreamReaderProtocol(reader, loop=loop)
        )
        return cls(proc, master, reader)

    async def read_output(self) -> bytes:
        if self._terminal is not None:
            try:
                return await self._terminal.read(CHUNK)
            except OSError as error:
                # A terminal whose last process has gone reads EIO, its way of saying EOF.
                if error.errno == errno.EIO:
                    return b""
                raise
        assert self._proc.stdout is not None
        return await self._proc.stdout.read(CHUNK)

    async def read_errors(self) -> bytes:
        if self._proc.stderr is None:
            return b""
        return await self._proc.stderr.read(CHUNK)

    async def write(self, data: bytes) -> None:
        if self._terminal is not None:
            await self._type(data)
            return
        assert self._proc.stdin is not None
        with contextlib.suppress(ConnectionError):
            self._proc.stdin.write(data)
            await self._proc.stdin.drain()

    def close_input(self) -> None:
        if self._master is not None:
            with contextlib.suppress(OSError):
                eof = termios.tcgetattr(self._master)[6][termios.VEOF]
                os.write(self._master, eof if isinstance(eof, bytes) else bytes([eof]))
            return
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()

    def resize(self, size: TerminalSize) -> None:
        if self._master is None:
            return
        with contextlib.suppress(OSError):
            fcntl.ioctl(self._master, termios.TIOCSWINSZ, _packed(size))

    async def wait(self) -> int:
        code = await self._proc.wait()
        self._close_terminal()
        return 128 - code if code < 0 else code

    async def _type(self, data: bytes) -> None:
        """What is typed, to the terminal, as fast as it takes it; on the loop's thread, so
        the terminal cannot be closed (and its number given to another file) mid-write. What
        comes after its process has ended goes nowhere."""
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        while view and self._master is not None:
            fd = self._master
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                self._writable = loop.create_future()
                loop.add_writer(fd, _wake, self._writable)
                try:
                    await self._writable
                finally:
                    if self._master == fd:
                        loop.remove_writer(fd)
                    self._writable = None
            except OSError:
                return  # its process is gone

    def _close_terminal(self) -> None:
        fd, self._master = self._master, None
        if fd is None:
            return
        if self._writable is not None:
            asyncio.get_running_loop().remove_writer(fd)
            _wake(self._writable)
        os.close(fd)

    def end(self) -> None:
        if self._proc.returncode is not None:
            return  # reaped: its group's number may be another's by now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)


def _packed(size: TerminalSize) -> bytes:
    """As ``TIOCSWINSZ`` takes it (rows, cols, pixel width, pixel height)."""
    side = 0xFFFF  # two bytes each
    return struct.pack("HHHH", min(max(1, size.rows), side), min(max(1, size.cols), side), 0, 0)


def _wake(waiting: asyncio.Future[None]) -> None:
    if not waiting.done():
        waiting.set_result(None)
