"""The local provider mounts a worker's network volume at ``/runpod-volume`` through real
bubblewrap (providers/bubblewrap.py), real subprocesses and real directories: the worker writes
into the volume's directory, sees the host as before, gets its SIGTERM grace, and leaves no
mount point behind on the host. Without bwrap a volume is refused, saying why."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eventually import eventually_async
from process_exits import Exits
from skiff.providers import bubblewrap
from skiff.providers.base import VOLUME_MOUNT_PATH, Launch
from skiff.providers.local import LocalProvider, environ_of
from skiff.services.logs import WorkerLogs

pytestmark = pytest.mark.skipif(
    bubblewrap.executable() is None,
    reason="bubblewrap (bwrap) is not installed: .ci/run installs it",
)


def launch(tmp_path: Path, code: str, volume: Path | None, worker_id: str = "w1") -> Launch:
    return Launch(
        worker_id=worker_id,
        endpoint_id="ep1",
        argv=[sys.executable, "-c", textwrap.dedent(code)],
        env=dict(os.environ) | {"RUNPOD_POD_ID": worker_id, "VOLUME_TEST": "seen"},
        home=tmp_path / "workers" / worker_id / "home",
        volume=volume,
    )


def provider_for(tmp_path: Path, exits: Exits) -> tuple[LocalProvider, WorkerLogs]:
    logs = WorkerLogs(tmp_path / "data", 1024 * 1024, 1)
    return LocalProvider(exits, logs=logs.sink), logs


def host_has_mount_point() -> bool:
    return Path(VOLUME_MOUNT_PATH).exists()


def ended(pid: int) -> bool:
    """Whether the process ``pid`` is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def log_text(logs: WorkerLogs, worker_id: str = "w1") -> str:
    return logs.log_path("ep1", worker_id).read_text()


async def test_a_worker_writes_into_its_volume_through_runpod_volume(tmp_path: Path) -> None:
    host_had_mount_point = host_has_mount_point()
    volume = tmp_path / "volumes" / "vol-1"
    volume.mkdir(parents=True)
    (volume / "before.txt").write_text("from the host")
    exits = Exits()
    provider, logs = provider_for(tmp_path, exits)
    code = f"""
        import os
        print(open("{VOLUME_MOUNT_PATH}/before.txt").read())
        with open("{VOLUME_MOUNT_PATH}/written.txt", "w") as f:
            f.write("from the worker")
        # The host as before: its files, this process's environment, the network's files.
        print("tmp", os.path.isdir("{tmp_path}"), os.environ["VOLUME_TEST"])
        print("proc", os.path.exists("/proc/self/status"), "dev", os.path.exists("/dev/null"))
        print("etc", os.path.exists("/etc/hosts"))
        print("cwd", os.getcwd())
    """
    await provider.start(launch(tmp_path, code, volume))
    await asyncio.wait_for(exits.done.wait(), 30)

    assert exits.codes == {"w1": 0}, log_text(logs)
    assert (volume / "written.txt").read_text() == "from the worker"
    text = log_text(logs)
    assert "from the host" in text
    assert "tmp True seen" in text
    assert "proc True dev True" in text and "etc True" in text
    assert f"cwd {os.getcwd()}\n" in text
    # bwrap made the mount point in its own root, not on the host's.
    assert host_has_mount_point() is host_had_mount_point


async def test_a_worker_without_a_volume_sees_no_runpod_volume(tmp_path: Path) -> None:
    if host_has_mount_point():
        pytest.skip(f"this host has a {VOLUME_MOUNT_PATH} of its own")
    exits = Exits()
    provider, logs = provider_for(tmp_path, exits)
    code = f"import os; print('exists', os.path.exists('{VOLUME_MOUNT_PATH}'))"
    await provider.start(launch(tmp_path, code, None))
    await asyncio.wait_for(exits.done.wait(), 30)
    assert "exists False" in log_text(logs)


async def test_a_stopped_worker_behind_bwrap_gets_its_grace_and_its_exit_code_is_reported(
    tmp_path: Path,
) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    exits = Exits()
    provider, logs = provider_for(tmp_path, exits)
    code = f"""
        import signal, sys, time
        def stop(*_):
            time.sleep(0.5)  # bwrap's own process must not end the worker meanwhile
            open("{VOLUME_MOUNT_PATH}/stopped", "w").write("cleanly")
            sys.exit(7)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(60)
    """
    await provider.start(launch(tmp_path, code, volume))
    log_path = logs.log_path("ep1", "w1")
    await eventually_async(
        lambda: log_path.exists() and "ready" in log_path.read_text(), "'ready' in the log"
    )
    await provider.stop("w1", grace=10)
    await asyncio.wait_for(exits.done.wait(), 30)
    assert exits.codes == {"w1": 7}
    assert (volume / "stopped").read_text() == "cleanly"


async def test_a_stop_ends_the_whole_group_inside_the_namespace(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    exits = Exits()
    provider, _logs = provider_for(tmp_path, exits)
    # The SDK forks a heartbeat process; a child ignoring SIGTERM is ended by the SIGKILL.
    code = f"""
        import os, signal, time
        child = os.fork()
        if child == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open("{VOLUME_MOUNT_PATH}/child", "w").write(str(os.getpid()))
            time.sleep(120)
            os._exit(0)
        print("ready", flush=True)
        time.sleep(120)
    """
    await provider.start(launch(tmp_path, code, volume))
    await eventually_async(
        lambda: (volume / "child").exists() and (volume / "child").read_text(),
        "the child to write its pid",
    )
    child_pid = int((volume / "child").read_text())
    await provider.stop("w1", grace=0.5)
    await asyncio.wait_for(exits.done.wait(), 30)
    try:
        await eventually_async(lambda: ended(child_pid), "the worker's child to end")
    except AssertionError:
        os.kill(child_pid, signal.SIGKILL)
        raise


async def test_a_leftover_worker_behind_bwrap_is_recognised_and_ended(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    exits = Exits()
    provider, _logs = provider_for(tmp_path, exits)
    pid = await provider.start(launch(tmp_path, "import time; time.sleep(120)", volume))
    # As a restarted server would: by pid, checked against the worker id in its environment.
    assert provider.kill_leftover("someone-else", pid) is False
    assert provider.kill_leftover("w1", pid) is True
    await asyncio.wait_for(exits.done.wait(), 30)


async def test_bwrap_is_found_able_to_mount_a_volume_here(tmp_path: Path) -> None:
    provider, _ = provider_for(tmp_path, Exits())
    assert await provider.volume_mount_problem() is None


async def test_without_bwrap_a_volume_is_refused_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    exits = Exits()
    provider, _ = provider_for(tmp_path, exits)
    problem = await provider.volume_mount_problem()
    assert problem is not None and "bubblewrap (bwrap)" in problem and "not installed" in problem
    volume = tmp_path / "vol"
    volume.mkdir()
    with pytest.raises(OSError, match="bubblewrap"):
        await provider.start(launch(tmp_path, "pass", volume))
    assert provider.running() == []


async def test_a_bwrap_that_cannot_make_its_namespace_is_refused_with_its_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel's refusal cannot be had here without changing the host, so a bwrap on PATH
    # answers as the real one does on a host without unprivileged user namespaces.
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the "
        "kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    provider, _ = provider_for(tmp_path, Exits())
    problem = await provider.volume_mount_problem()
    assert problem is not None
    assert "No permissions to creating new namespace" in problem
    assert "unprivileged user namespaces may be turned off" in problem
    # Asked again, it is tried again: a refusal is not kept.
    monkeypatch.setenv("PATH", os.environ["PATH"].split(os.pathsep, 1)[1])
    assert await provider.volume_mount_problem() is None


def test_a_process_read_in_the_middle_of_an_exec_shows_its_environment() -> None:
    # The kernel shows an empty environment for a moment of every execve (a worker's shim
    # execs bwrap): a leftover read then must not pass for another program. Read flat out
    # across many such execs, the plain read came back empty about once in 5,000 reads here.
    env = {"PATH": os.environ["PATH"], "RUNPOD_POD_ID": "w1"}
    shim = "import os; os.execvpe('sleep', ['sleep', '5'], os.environ)"
    for _ in range(100):
        proc = subprocess.Popen([sys.executable, "-S", "-c", shim], env=env)
        try:
            for _ in range(300):
                assert b"RUNPOD_POD_ID=w1" in environ_of(proc.pid).split(b"\0")
        finally:
            proc.kill()
            proc.wait()
