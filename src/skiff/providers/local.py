"""Workers as OS processes on this host.

Each worker is its own session (process group), so stopping it ends everything it started
(the runpod SDK forks a heartbeat process). On Linux each worker is also tied to the server
with PR_SET_PDEATHSIG: if the server dies, its workers die with it instead of polling a dead
port; the start-up sweep (``kill_leftover``) ends any process group that outlived it anyway.

A worker's stdout and stderr go through a pipe that skiff reads, not straight to a file, so its
log can be capped and rotated (``WORKER.log``, ``.log.1`` … ``.log.N``) and each line stamped
with the time it was read (the format is in ``domain/logs.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from skiff.datadir import make_private_dirs, private_opener
from skiff.domain.logs import MAX_LINE_BYTES, rotated, stamp
from skiff.providers.base import ExitCallback, Launch

log = logging.getLogger(__name__)

# A tiny exec shim: arm PDEATHSIG, make sure the parent did not die before that, then become
# the worker command. Costs a bare interpreter start (-S -I), a few milliseconds.
_SHIM = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "os.getppid() == int(sys.argv[1]) or sys.exit(70)\n"
    "os.execvpe(sys.argv[2], sys.argv[2:], os.environ)\n"
)


def _shimmed(argv: list[str]) -> list[str]:
    if sys.platform != "linux":
        return argv
    return [sys.executable, "-S", "-I", "-c", _SHIM, str(os.getpid()), *argv]


#: Defaults of ``SKIFF_LOG_MAX_BYTES`` and ``SKIFF_LOG_BACKUPS``.
DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_LOG_BACKUPS = 2
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


class LogFile:
    """A worker's log: appends stamped lines and rotates the file when it would pass
    ``max_bytes`` (a file holds at least one line, so one is never above the cap by more than
    a line). ``WORKER.log`` becomes ``.log.1``, ``.1`` becomes ``.2`` …, the oldest past
    ``backups`` is dropped. A write that fails (disk full, the endpoint's folder removed) turns
    the log off rather than stop reading the worker's pipe, which would block the worker."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self._max_bytes = max_bytes
        self._backups = backups
        # 0600 from the start: a worker's output can hold whatever its handler printed.
        self._file: io.FileIO | None = io.FileIO(path, "ab", opener=private_opener)
        self._size = os.fstat(self._file.fileno()).st_size

    def write(self, lines: list[bytes], ts: float) -> None:
        if self._file is None:
            return
        prefix = stamp(ts)
        size = len(prefix) * len(lines) + sum(map(len, lines)) + len(lines)
        if self._size + size <= self._max_bytes:
            # The usual case, whole in the current file: one join instead of a loop per line.
            self._append(b"".join(b"%s%s\n" % (prefix, line) for line in lines))
            return
        batch = bytearray()
        for line in lines:
            used = self._size + len(batch)
            if used > 0 and used + len(prefix) + len(line) + 1 > self._max_bytes:
                self._append(batch)
                batch.clear()
                self._rotate()
                if self._file is None:
                    return
            batch += prefix
            batch += line
            batch += b"\n"
        self._append(batch)

    def _append(self, data: bytes | bytearray) -> None:
        # One write() per batch: a reader never sees the file grow by half a line (but for
        # batches past a page, which readers tolerate by keeping only complete lines).
        view = memoryview(data)
        try:
            while view and self._file is not None:
                written = self._file.write(view)
                if not written:  # None only for non-blocking files; this one blocks
                    raise OSError("the log file accepted no bytes")
                view = view[written:]
                self._size += written
        except OSError as exc:
            self._fail(exc)

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        try:
            if self._backups > 0:
                # os.replace overwrites the target: the oldest file past `backups` is dropped.
                for n in range(self._backups, 1, -1):
                    older = rotated(self.path, n - 1)
                    if older.exists():
                        os.replace(older, rotated(self.path, n))
                os.replace(self.path, rotated(self.path, 1))
            else:
                # A new file rather than a truncated one, so a follower sees a new inode.
                self.path.unlink(missing_ok=True)
            # Never recreates the folder: if it is gone, the endpoint was deleted.
            self._file = io.FileIO(self.path, "ab", opener=private_opener)
            self._size = 0
        except OSError as exc:
            self._file = None
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        log.warning("writing the log %s failed (%s); the rest of it is dropped", self.path, exc)
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


async def copy_lines(reader: asyncio.StreamReader, log_file: LogFile) -> None:
    """Copy the worker's output to its log line by line until EOF. Lines are cut at
    MAX_LINE_BYTES, and the StreamReader pauses the pipe when its buffer is full, so a worker
    writing faster than this copies is slowed down rather than held in memory."""
    pending = b""
    try:
        while chunk := await reader.read(_CHUNK):
            pending += chunk
            lines = pending.split(b"\n")
            pending = lines.pop()
            if max(map(len, lines), default=0) <= MAX_LINE_BYTES:
                out = lines  # no line to cut (the usual case)
            else:
                out = []
                for line in lines:
                    out.extend(
                        line[i : i + MAX_LINE_BYTES] for i in range(0, len(line), MAX_LINE_BYTES)
                    )
                    if not line:
                        out.append(line)
            while len(pending) >= MAX_LINE_BYTES:
                out.append(pending[:MAX_LINE_BYTES])
                pending = pending[MAX_LINE_BYTES:]
            log_file.write(out, time.time())
    finally:
        # The last line of a worker that died mid-line is kept too.
        if pending:
            log_file.write([pending], time.time())
        log_file.close()


class LocalProvider:
    def __init__(
        self,
        on_exit: ExitCallback,
        cwd: Path | None = None,
        log_max_bytes: int = DEFAULT_LOG_MAX_BYTES,
        log_backups: int = DEFAULT_LOG_BACKUPS,
    ) -> None:
        self._on_exit = on_exit
        self._cwd = cwd
        self._log_max_bytes = log_max_bytes
        self._log_backups = log_backups
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._watchers: set[asyncio.Task[None]] = set()

    async def start(self, launch: Launch) -> int:
        # The user's alone, like the data directory they are in (datadir.py).
        make_private_dirs(launch.log_path.parent)
        make_private_dirs(launch.home)
        log_file = LogFile(launch.log_path, self._log_max_bytes, self._log_backups)
        # A pipe of our own rather than stdout=PIPE: asyncio's Process.wait() would then wait
        # for the pipe to close too, which a leftover child of the worker can hold open.
        read_fd, write_fd = os.pipe()
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_CHUNK, loop=loop)
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
                open(read_fd, "rb", buffering=0),  # noqa: ASYNC230, SIM115 - the transport owns it
            )
        except BaseException:
            os.close(read_fd)
            os.close(write_fd)
            log_file.close()
            raise
        try:
            proc = await asyncio.create_subprocess_exec(
                *_shimmed(launch.argv),
                env=launch.env,
                cwd=self._cwd,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            transport.close()
            log_file.close()
            raise
        finally:
            # Only the worker holds the write end now, so its exit is the pipe's EOF.
            os.close(write_fd)
        self._procs[launch.worker_id] = proc
        pump = asyncio.create_task(self._pump(reader, transport, log_file))
        task = asyncio.create_task(self._watch(launch.worker_id, proc, pump))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)
        return proc.pid

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, transport: asyncio.ReadTransport, log_file: LogFile
    ) -> None:
        try:
            await copy_lines(reader, log_file)
        except Exception:
            log.exception("copying the output of %s failed", log_file.path)
            # Keep emptying the pipe: a full one would block the worker on its next print.
            while await reader.read(_CHUNK):
                pass
        finally:
            transport.close()

    async def _watch(
        self, worker_id: str, proc: asyncio.subprocess.Process, pump: asyncio.Task[None]
    ) -> None:
        code = await proc.wait()
        # The leader is gone; end whatever it left in its group (the SDK's heartbeat process).
        _kill_group(proc.pid, signal.SIGKILL)
        self._procs.pop(worker_id, None)
        # Report the exit only once the log holds the worker's last lines, so whoever handles
        # it (or asks for the log) sees why it ended.
        done, _ = await asyncio.wait({pump}, timeout=_DRAIN_SECONDS)
        if not done:
            pump.cancel()
            await asyncio.wait({pump})
        try:
            await self._on_exit(worker_id, code)
        except Exception:
            log.exception("handling the exit of worker %s failed", worker_id)

    async def stop(self, worker_id: str, grace: float) -> None:
        proc = self._procs.get(worker_id)
        if proc is None or proc.returncode is not None:
            return
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        except TimeoutError:
            _kill_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), 5)

    async def stop_all(self, grace: float) -> None:
        await asyncio.gather(*(self.stop(w, grace) for w in list(self._procs)))
        # Let the watchers report the exits before the store closes.
        if self._watchers:
            await asyncio.wait(set(self._watchers), timeout=5)

    def running(self) -> list[str]:
        return list(self._procs)

    def kill_leftover(self, worker_id: str, pid: int) -> bool:
        """Only a process that really is that worker: its environment names the worker id,
        so a recycled pid of an unrelated process is never touched."""
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return _kill_group(pid, signal.SIGKILL) if _group_exists(pid) else False
        if f"RUNPOD_POD_ID={worker_id}".encode() not in environ.split(b"\0"):
            return False
        return _kill_group(pid, signal.SIGKILL)


def _group_exists(pgid: int) -> bool:
    """A group whose leader is gone may still have members (the heartbeat process)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
