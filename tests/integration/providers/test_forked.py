"""A forked worker known by its pidfd (providers/forked.py), with real processes standing in
for a zygote's children: its end is taken from the kernel, not from what its zygote says, and
once it has ended nothing is sent to its number, which the host may have given to another."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from eventually import eventually_async
from skiff.providers import forked
from skiff.providers.fork_server import SandboxSpot, ZygoteKey, _Start, _Zygote
from skiff.providers.forked import EXIT_NOT_REPORTED, ForkedProcess, open_pidfd

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="pidfds are Linux's")


async def _sleeper() -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)", start_new_session=True
    )


def _zygote() -> _Zygote:
    spot = SandboxSpot("/h", "/c", None, "/runpod-volume", "/c/s.py")
    return _Zygote(ZygoteKey("/usr/bin/python3", (), spot), _Start({}, None, None))


async def _adopted(zygote: _Zygote, pid: int) -> ForkedProcess:
    """What the zygote's worker announcing itself (its credentials' pid ``pid``) gives."""
    waiter: asyncio.Future[ForkedProcess] = asyncio.get_running_loop().create_future()
    zygote._waiting[7] = waiter
    zygote._on_message(b'{"forked": 7, "pid": 3}', pid)
    return await waiter


async def test_a_zygotes_report_of_a_live_worker_is_not_believed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(forked, "REPORT_SECONDS", 0.1)
    proc = await _sleeper()
    zygote = _zygote()
    child = await _adopted(zygote, proc.pid)
    zygote._on_message(b'{"exited": 3, "code": 0}', 99)
    await asyncio.sleep(0.05)
    assert child.returncode is None and child.alive() and zygote._children == {3: child}
    assert child.signal_group(signal.SIGTERM)
    assert await proc.wait() == -signal.SIGTERM
    # Its end, from the pidfd; with no report after it, the code says so.
    assert await asyncio.wait_for(child.wait(), 10) == EXIT_NOT_REPORTED
    assert zygote._children == {}


async def test_a_report_after_the_end_gives_the_exit_code() -> None:
    proc = await _sleeper()
    zygote = _zygote()
    child = await _adopted(zygote, proc.pid)
    proc.kill()
    await proc.wait()
    zygote._on_message(b'{"exited": 3, "code": -9}', 99)
    assert await asyncio.wait_for(child.wait(), 10) == -signal.SIGKILL


async def test_a_worker_that_has_ended_is_never_signalled_by_its_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(forked, "REPORT_SECONDS", 30.0)
    proc = await _sleeper()
    child = ForkedProcess(proc.pid, open_pidfd(proc.pid))
    proc.kill()
    await proc.wait()
    await eventually_async(lambda: not child.alive(), "its end, seen through its pidfd")
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    assert child.signal_group(signal.SIGTERM) is False
    assert child.signal_group(signal.SIGKILL) is False
    assert sent == []
    # Its code unknown yet: it has not finished, and the server does not make one up.
    assert child.returncode is None


async def test_a_worker_gone_before_it_is_adopted_fails_its_fork() -> None:
    proc = await _sleeper()
    proc.kill()
    await proc.wait()
    zygote = _zygote()
    waiter: asyncio.Future[ForkedProcess] = asyncio.get_running_loop().create_future()
    zygote._waiting[7] = waiter
    zygote._on_message(b'{"forked": 7, "pid": 3}', proc.pid)
    with pytest.raises(OSError, match="ended before it was adopted"):
        await waiter
    assert zygote._children == {}


async def test_a_worker_the_server_ended_ends_with_the_code_it_gave() -> None:
    proc = await _sleeper()
    child = ForkedProcess(proc.pid, open_pidfd(proc.pid))
    assert child.signal_group(signal.SIGKILL)
    child.ends_with(-signal.SIGKILL)
    assert await asyncio.wait_for(child.wait(), 10) == -signal.SIGKILL
    await proc.wait()
