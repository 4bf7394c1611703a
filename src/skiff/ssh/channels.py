"""One SSH session channel carried to and from a process in the pod.

The channel asks for a shell, a command (``ssh … 'python train.py'``, ``rsync --server …``,
``scp -t …``) or the ``sftp`` subsystem (``sftp``, and ``scp`` since OpenSSH 9), on a terminal
or not; ``PodShells.open`` starts that in the pod (``providers/pod_entry.py``). Bytes go both
ways with flow control each way: the client's input waits while the process does not read it,
the process's output waits while the client does not take it. Its exit code goes back to the
client; a session skiff ends (the pod stopped, idle too long) says why on its error output.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable

import asyncssh
from attrs import define, field

from skiff.domain.pod_sessions import SFTP_COMMAND, EntryRequest, TerminalSize
from skiff.errors import SkiffError
from skiff.services.pod_shells import Caller, PodShells, Session
from skiff.ssh.doors import Admitted, still_admitted, still_holds

log = logging.getLogger(__name__)

#: One of a process's outputs, read; and where it goes on the channel.
_Read = Callable[[], Awaitable[bytes]]
_Write = Callable[[bytes], None]

#: Input chunks held for a process that does not read them before the client is paused.
MAX_PENDING_INPUT = 16

#: What a client may pass of its own environment (``SendEnv``), as sshd's usual ``AcceptEnv``.
ACCEPTED_ENV = ("LANG", "LC_")


@define(eq=False, repr=False, slots=False)
class PodChannel(asyncssh.SSHServerSession[bytes]):
    _shells: PodShells
    _caller: Caller
    _admitted: Admitted
    #: The client's address.
    _client: str
    #: The address it reached (``SSH_CONNECTION``'s second half).
    _local: str
    _chan: asyncssh.SSHServerChannel[bytes] | None = field(init=False, default=None)
    _command: str | None = field(init=False, default=None)
    _terminal: TerminalSize | None = field(init=False, default=None)
    _term: str = field(init=False, default="")
    _session: Session | None = field(init=False, default=None)
    #: The client's input, in order; None: its EOF.
    _input: asyncio.Queue[bytes | None] = field(init=False, factory=asyncio.Queue)
    _reading_paused: bool = field(init=False, default=False)
    _can_write: asyncio.Event = field(init=False, factory=asyncio.Event)
    _task: asyncio.Task[None] | None = field(init=False, default=None)
    _left: bool = field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self._pod_id = self._admitted.pod_id
        self._can_write.set()

    # -- what the client asks ---------------------------------------------------------------
    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self._chan = chan

    def pty_requested(
        self, term_type: str, term_size: tuple[int, int, int, int], term_modes: object
    ) -> bool:
        if not self._admitted.may_have_terminal:
            return False  # its key says no-pty (or restrict)
        self._term = term_type[:64]
        self._terminal = _size(term_size[0], term_size[1])
        return True

    def shell_requested(self) -> bool:
        return True

    def exec_requested(self, command: str) -> bool:
        self._command = command
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        if subsystem != "sftp":
            return False
        self._command = SFTP_COMMAND
        return True

    def session_started(self) -> None:
        self._task = asyncio.create_task(self._run())

    # -- what comes in -----------------------------------------------------------------------
    def data_received(self, data: bytes, datatype: int | None) -> None:
        self._input.put_nowait(data)
        if self._input.qsize() >= MAX_PENDING_INPUT and self._chan is not None:
            self._chan.pause_reading()
            self._reading_paused = True

    def eof_received(self) -> bool:
        self._input.put_nowait(None)
        return True  # output goes on after the client's EOF

    def terminal_size_changed(self, width: int, height: int, pixwidth: int, pixheight: int) -> None:
        self._terminal = _size(width, height)
        if self._session is not None:
            self._shells.resize(self._session, self._terminal)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._left = True
        self._can_write.set()
        self._input.put_nowait(None)
        if self._session is not None:
            self._session.entry.end()

    # -- the session -------------------------------------------------------------------------
    def _request(self) -> EntryRequest:
        assert self._chan is not None
        env = {
            name: value
            for name, value in self._chan.get_environment().items()
            if name.startswith(ACCEPTED_ENV)
        }
        peer = self._caller.origin.rsplit(":", 1)
        env["SSH_CLIENT"] = f"{peer[0]} {peer[-1]} {self._local.rsplit(':', 1)[-1]}"
        env["SSH_CONNECTION"] = f"{peer[0]} {peer[-1]} {self._local.replace(':', ' ')}"
        if self._terminal is not None:
            env["TERM"] = self._term or "xterm"
        return EntryRequest(self._command, self._terminal, env)

    async def _run(self) -> None:
        chan = self._chan
        assert chan is not None
        try:
            if not await still_admitted(self._shells, self._admitted, self._client):
                chan.write_stderr(b"skiff: this key no longer opens this pod\r\n")
                chan.exit(1)
                return
            session = await self._shells.open(
                self._caller,
                self._pod_id,
                self._request(),
                functools.partial(
                    still_holds,
                    self._shells,
                    self._admitted,
                    self._client,
                    self._terminal is not None,
                ),
            )
        except SkiffError as refused:
            chan.write_stderr(f"skiff: {refused}\r\n".encode())
            chan.exit(1)
            return
        except Exception:
            log.exception("ssh: a session in pod %s could not open", self._pod_id)
            chan.write_stderr(b"skiff: the session could not open; the server's log says why\r\n")
            chan.exit(1)
            return
        self._session = session
        if self._left:
            session.entry.end()
        entry = session.entry
        feeding = asyncio.create_task(self._feed(session))
        code: int | None = None
        try:
            await asyncio.gather(
                self._drain(session, entry.read_output, chan.write),
                self._drain(session, entry.read_errors, chan.write_stderr),
            )
            code = await entry.wait()
        finally:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeding
            await self._shells.close(session, None if self._left else code)
        if self._left:
            return
        if code is None or code >= 128 or session.ended_because is not None:
            # Killed, or ended by skiff: say why (the pod stopped, idle too long).
            how = await self._shells.ending(session, code)
            if not how.startswith("exit code"):
                chan.write_stderr(f"\r\nskiff: session ended: {how}\r\n".encode())
        chan.exit(code)

    async def _drain(self, session: Session, read: _Read, write: _Write) -> None:
        """One of the process's outputs to the client until it ends, as fast as the client
        takes it."""
        while chunk := await read():
            self._shells.touch(session)
            await self._can_write.wait()
            if self._left:
                continue  # nobody to tell: read on until the process is gone
            write(chunk)

    async def _feed(self, session: Session) -> None:
        """The client's input to the process, in order, then its EOF."""
        entry = session.entry
        while (data := await self._input.get()) is not None:
            self._shells.touch(session)
            await entry.write(data)
            if self._reading_paused and self._input.qsize() < MAX_PENDING_INPUT // 2:
                self._reading_paused = False
                if self._chan is not None:
                    self._chan.resume_reading()
        entry.close_input()


#: The largest terminal a client may ask for (a size is two bytes to the kernel).
MAX_TERMINAL_SIDE = 4096


def _size(cols: int, rows: int) -> TerminalSize:
    """A client's terminal size, 80 by 24 where it says 0, at most ``MAX_TERMINAL_SIDE``."""
    return TerminalSize(min(cols or 80, MAX_TERMINAL_SIDE), min(rows or 24, MAX_TERMINAL_SIDE))
