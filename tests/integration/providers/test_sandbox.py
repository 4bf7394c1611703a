"""The local provider's sandbox (providers/bubblewrap.py) with real bubblewrap, real
subprocesses and real directories: a sandboxed worker writes its home and volume and nothing of
the data directory, sees only its own processes, is uid 1000, keeps its SIGTERM grace and exit
code, and a stop or a restarted server's sweep still ends its whole group."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from eventually import eventually_async
from process_exits import Exits
from skiff.providers import bubblewrap
from skiff.providers.base import VOLUME_MOUNT_PATH, Launch
from skiff.providers.local import LocalProvider
from skiff.services.logs import WorkerLogs

pytestmark = pytest.mark.skipif(
    bubblewrap.executable() is None,
    reason="bubblewrap (bwrap) is not installed: .ci/run installs it",
)


def ended(send: Callable[[int, int], None], pid: int) -> bool:
    """Whether ``pid`` (a process or, with ``os.killpg``, a group) is gone."""
    try:
        send(pid, 0)
    except ProcessLookupError:
        return True
    return False


class Box:
    """A data directory with another worker's home and the database in it, and a provider
    whose workers run in the sandbox that hides it."""

    def __init__(self, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        (self.data / "workers" / "other" / "home").mkdir(parents=True)
        (self.data / "workers" / "other" / "home" / "secret").write_text("OTHER-HOME")
        (self.data / "skiff.db").write_text("DATABASE")
        self.volumes = self.data / "volumes"
        self.volume = self.volumes / "vol-1"
        self.volume.mkdir(parents=True)
        self.exits = Exits()
        self.logs = WorkerLogs(self.data, 1024 * 1024, 1)
        sandbox = bubblewrap.Sandbox.for_server(
            self.data, volumes_dir=self.volumes, database_file=self.data / "skiff.db"
        )
        self.provider = LocalProvider(self.exits, logs=self.logs.sink, sandbox=sandbox)

    def launch(self, code: str, worker_id: str = "w1", volume: bool = True) -> Launch:
        home = self.data / "workers" / worker_id / "home"
        return Launch(
            worker_id=worker_id,
            endpoint_id="ep1",
            argv=[sys.executable, "-c", textwrap.dedent(code)],
            env=dict(os.environ) | {"RUNPOD_POD_ID": worker_id, "HOME": str(home)},
            home=home,
            volume=self.volume if volume else None,
        )

    def log(self, worker_id: str = "w1") -> str:
        return self.logs.log_path("ep1", worker_id).read_text()

    async def wait_for_line(self, text: str, worker_id: str = "w1") -> None:
        path = self.logs.log_path("ep1", worker_id)
        await eventually_async(
            lambda: path.exists() and text in path.read_text(), f"{text!r} in the log"
        )


async def test_a_sandboxed_worker_writes_its_home_and_volume_and_never_the_data_directory(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path)
    code = f"""
        import os
        open(os.path.join(os.environ["HOME"], "mine"), "w").write("home")
        open("{VOLUME_MOUNT_PATH}/mine", "w").write("volume")
        print("uid", os.getuid())
        print("db", os.path.exists("{box.data}/skiff.db"))
        print("other", os.path.exists("{box.data}/workers/other/home/secret"))
        v = "{box.volumes}"
        print("volumes", os.listdir(v) if os.path.isdir(v) else [])
        print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
        try:
            open("{box.data}/planted", "w").write("x")
        except OSError as exc:
            print("planted", type(exc).__name__)
        try:
            open("/etc/planted", "w")
        except OSError as exc:
            print("etc", type(exc).__name__)
    """
    await box.provider.start(box.launch(code))
    await asyncio.wait_for(box.exits.done.wait(), 30)
    text = box.log()
    assert box.exits.codes == {"w1": 0}, text
    assert (box.data / "workers" / "w1" / "home" / "mine").read_text() == "home"
    assert (box.volume / "mine").read_text() == "volume"
    assert f"uid {bubblewrap.SANDBOX_UID}" in text
    assert "db False" in text and "other False" in text and "volumes []" in text
    # Its PID namespace: the sandbox's init and itself.
    assert "pids [1, 2]" in text
    # A write in the covered data directory lands in the sandbox's own empty directory.
    assert not (box.data / "planted").exists()
    assert "etc OSError" in text


async def test_a_stopped_sandboxed_worker_gets_its_grace_and_its_exit_code_is_reported(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path)
    code = f"""
        import signal, sys, time
        def stop(*_):
            time.sleep(0.5)  # bwrap's own processes must not end the worker meanwhile
            open("{VOLUME_MOUNT_PATH}/stopped", "w").write("cleanly")
            sys.exit(7)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(60)
    """
    await box.provider.start(box.launch(code))
    await box.wait_for_line("ready")
    await box.provider.stop("w1", grace=10)
    await asyncio.wait_for(box.exits.done.wait(), 30)
    assert box.exits.codes == {"w1": 7}
    assert (box.volume / "stopped").read_text() == "cleanly"


async def test_a_stop_ends_a_child_that_ignores_sigterm_inside_the_sandbox(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path)
    code = """
        import os, signal, time
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("child", flush=True)
            time.sleep(120)
            os._exit(0)
        time.sleep(120)
    """
    pid = await box.provider.start(box.launch(code))
    await box.wait_for_line("child")
    await box.provider.stop("w1", grace=0.5)
    await asyncio.wait_for(box.exits.done.wait(), 30)
    # Nothing is left of the group (the child is a member, whatever its pid inside).
    try:
        await eventually_async(lambda: ended(os.killpg, pid), "the worker's group to end")
    except AssertionError:
        os.killpg(pid, signal.SIGKILL)
        raise


async def test_a_leftover_sandboxed_worker_is_recognised_and_ended(tmp_path: Path) -> None:
    box = Box(tmp_path)
    pid = await box.provider.start(box.launch("import time; time.sleep(120)", volume=False))
    assert box.provider.kill_leftover("someone-else", pid) is False
    assert box.provider.kill_leftover("w1", pid) is True
    await asyncio.wait_for(box.exits.done.wait(), 30)


async def test_the_sandbox_is_found_to_work_here(tmp_path: Path) -> None:
    assert await Box(tmp_path).provider.sandbox_problem() is None


async def test_without_bwrap_the_sandbox_problem_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    box = Box(tmp_path)
    problem = await box.provider.sandbox_problem()
    assert problem is not None and "bubblewrap" in problem and "not installed" in problem


async def test_a_probe_that_leaves_a_process_behind_is_ended_whole_and_answers(
    tmp_path: Path,
) -> None:
    """What bwrap can do on a machine too busy to finish in time: its own process ends while a
    process it forked stays, holding the error output. The probe answers at once and leaves
    nothing behind."""
    pid_file = tmp_path / "left.pid"
    command = [
        "sh",
        "-c",
        f"sleep 300 >&2 & echo $! > {pid_file}; echo 'bwrap: setting up uid map' >&2; exit 1",
    ]

    said = await asyncio.wait_for(bubblewrap.run_probe(command, None, "a probe"), 30)

    assert said is not None and "setting up uid map" in said
    left = int(pid_file.read_text())
    await eventually_async(lambda: _dead(left), "the process left behind ended")


def _dead(pid: int) -> bool:
    """Gone, or a zombie (ended, waiting for whichever init adopted it to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
