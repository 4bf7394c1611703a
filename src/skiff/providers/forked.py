"""A worker forked by a zygote, as the server knows it: by a pidfd, not by its pid alone.

A sandboxed zygote shares its sandbox with the tenant's code and may run some of it (it imports
the SDK from the tenant's own ``PYTHONPATH``), so what it says about its children is believed
only where it can hurt nobody else. A pid is only a number: once a worker has ended and its
zygote has reaped it, the number goes to the next process the host starts (``pid_max`` is
32,768 on many hosts, so it comes round quickly), maybe another tenant's. A zygote that reaped a
worker and never reported it would leave the server holding that number, and signalling it when
the endpoint's workers are stopped.

So the server opens a pidfd for each worker as it announces itself (held at its gate, before
anything of its own runs: ``fork_server.py``), learns of its end from the pidfd, and signals its
process group only while the pidfd says the worker lives: a live process's number is its own,
and so is the group it leads. The zygote's report gives the exit code and nothing else (only a
parent can read a child's status); a worker whose end goes unreported for ``REPORT_SECONDS``
ends with ``EXIT_NOT_REPORTED``. Where the kernel has no pidfds (before Linux 5.3) the zygote's
word is all there is, as it was before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
from collections.abc import Callable

log = logging.getLogger(__name__)

#: How long after a worker's end its zygote's report of the exit code is waited for.
REPORT_SECONDS = 2.0
#: The exit code of a worker whose zygote did not report it (a shell's "out of range").
EXIT_NOT_REPORTED = 255


def open_pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``; None where this kernel or platform has none. ProcessLookupError when
    no process has that pid."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, NotImplementedError):
        return None
    except ProcessLookupError:
        raise
    except OSError as exc:
        # ENOSYS before Linux 5.3, EPERM under a seccomp filter that forbids it.
        log.debug("no pidfd for %s: %s", pid, exc)
        return None


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class ForkedProcess:
    """What ``local.py`` uses of an ``asyncio`` process (``pid``, ``returncode``, ``wait``), for
    a worker forked by a zygote. ``pid`` is its pid on this host; ``pidfd`` its pidfd, or None
    where there is none."""

    def __init__(self, pid: int, pidfd: int | None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = self._loop.create_future()
        #: The code it ends with when the server ended it (its zygote gone), else reported.
        self._expected: int | None = None
        self._ended = False
        self._unreported: asyncio.TimerHandle | None = None
        if pidfd is not None:
            self._loop.add_reader(pidfd, self._on_end)

    def alive(self) -> bool:
        if self.returncode is not None or self._ended:
            return False
        return self._pidfd is None or not _readable(self._pidfd)

    def signal_group(self, sig: signal.Signals) -> bool:
        """Signal its process group (its own session, with the SDK's helpers in it), only while
        it lives: a number already given up may be another process's. Whatever of a sandboxed
        worker outlives it is in its cgroup, which is killed with it (``cgroups.py``)."""
        if not self.alive():
            return False
        try:
            os.killpg(self.pid, sig)
            return True
        except ProcessLookupError:
            # It leads no group (a zygote that skipped the ``setsid``): itself, then.
            if self._pidfd is None:
                return False
        except PermissionError:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(self._pidfd, sig)
            return True
        return False

    def exited(self, code: int) -> None:
        """Its zygote's report: believed once it has ended (the zygote reaps it before it
        reports, so its pidfd says so by then); a report of a worker alive is dropped."""
        if self._pidfd is None:
            self._finish(code)
        elif self.alive():
            log.warning("a fork server reported the exit of worker process %s, alive", self.pid)
        elif self._ended:
            self._finish(code)
        else:
            # Ended, and the loop has not yet run the pidfd's callback.
            self._expected = code
            self._on_end()

    def ends_with(self, code: int) -> None:
        """The server itself ended it (its zygote gone): the code to give when it has ended."""
        if self._pidfd is None or self._ended:
            self._finish(code)
        else:
            self._expected = code

    def _on_end(self) -> None:
        """The pidfd says it has ended. Whatever is left of its group goes at once, while its
        number is still held (a zombie's until it is reaped, then its group's members')."""
        if self._ended or self._pidfd is None:
            return
        self._ended = True
        self._loop.remove_reader(self._pidfd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self._expected is not None:
            self._finish(self._expected)
        else:
            self._unreported = self._loop.call_later(
                REPORT_SECONDS, self._finish, EXIT_NOT_REPORTED
            )

    def _finish(self, code: int) -> None:
        if self.returncode is not None:
            return
        self.returncode = code
        if self._unreported is not None:
            self._unreported.cancel()
        if self._pidfd is not None:
            if not self._ended:
                self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._exited.set_result(code)

    def on_end(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once it has ended and its code is known."""
        self._exited.add_done_callback(lambda _: callback())

    async def wait(self) -> int:
        return int(await asyncio.shield(self._exited))
