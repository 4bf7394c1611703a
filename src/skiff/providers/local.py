"""Workers as OS processes on this host.

Each worker is its own session (process group), so stopping it ends everything it started
(the runpod SDK forks a heartbeat process). On Linux each worker is also tied to the server
with PR_SET_PDEATHSIG: if the server dies, its workers die with it instead of polling a dead
port; the start-up sweep (``kill_leftover``) ends any process group that outlived it anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

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


def _kill_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class LocalProvider:
    def __init__(self, on_exit: ExitCallback, cwd: Path | None = None) -> None:
        self._on_exit = on_exit
        self._cwd = cwd
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._watchers: set[asyncio.Task[None]] = set()

    async def start(self, launch: Launch) -> int:
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        launch.home.mkdir(parents=True, exist_ok=True)
        with open(launch.log_path, "ab") as log_file:  # noqa: ASYNC230 - a local open()
            proc = await asyncio.create_subprocess_exec(
                *_shimmed(launch.argv),
                env=launch.env,
                cwd=self._cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs[launch.worker_id] = proc
        task = asyncio.create_task(self._watch(launch.worker_id, proc))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)
        return proc.pid

    async def _watch(self, worker_id: str, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        # The leader is gone; end whatever it left in its group (the SDK's heartbeat process).
        _kill_group(proc.pid, signal.SIGKILL)
        self._procs.pop(worker_id, None)
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
