"""The Ray actor's worker process, run here without Ray (its module is the standard library
alone, so that it can be sent to the nodes by value): the worker's environment, its output kept
until read and let go once read, its exit reported after the last of its output, and a stop
that ends its whole process group."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from eventually import eventually
from skiff.providers import ray_actor
from skiff.providers.ray_actor import WorkerProcess


def spec(tmp_path: Path, code: str, **more: Any) -> dict[str, Any]:
    return {
        "worker_id": "w1",
        "endpoint_id": "e1",
        "argv": [sys.executable, "-c", code],
        "env": {"HOME": str(tmp_path / "home"), "FROM_TEMPLATE": "yes"},
        "gpu_type": None,
        "gpu_count": 0,
        "port": None,
        "health_port": None,
        "cwd": str(tmp_path),
    } | more


def read_all(process: WorkerProcess) -> tuple[bytes, int]:
    return read_all_from(process, 0)


def test_the_worker_gets_the_nodes_environment_beneath_its_own_without_rays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_ONLY", "node")
    monkeypatch.setenv("RAY_ADDRESS", "secret-of-the-node")
    monkeypatch.setenv("SKIFF_API_KEY", "never")
    code = (
        "import os; print(os.environ.get('NODE_ONLY'), os.environ.get('FROM_TEMPLATE'), "
        "os.environ.get('RAY_ADDRESS'), os.environ.get('SKIFF_API_KEY'), os.getcwd())"
    )
    out, exit_code = read_all(WorkerProcess(spec(tmp_path, code)))
    assert exit_code == 0
    assert out.decode().split() == ["node", "yes", "None", "None", str(tmp_path)]
    assert (tmp_path / "home").is_dir()


def test_a_gpu_worker_sees_the_gpus_ray_assigned_the_actor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # as Ray sets it in the actor's process
    code = (
        "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['NVIDIA_VISIBLE_DEVICES'])"
    )
    out, _ = read_all(WorkerProcess(spec(tmp_path, code, gpu_count=1, gpu_type="X")))
    assert out.decode().split() == ["3", "3"]


def test_output_is_kept_until_read_and_the_exit_comes_after_the_last_of_it(
    tmp_path: Path,
) -> None:
    code = "import sys; [print('line', i) for i in range(2000)]; sys.exit(3)"
    process = WorkerProcess(spec(tmp_path, code))
    out, exit_code = read_all(process)
    assert exit_code == 3
    assert out.decode().splitlines() == [f"line {i}" for i in range(2000)]


def test_a_read_lets_go_of_what_came_before_it_and_a_late_reader_starts_at_what_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_actor, "KEPT_BYTES", 1000)
    code = "import sys; sys.stdout.write('x' * 5000); sys.stdout.flush()"
    process = WorkerProcess(spec(tmp_path, code))
    # Nobody reads while it writes (a leader is away): only the newest 1000 bytes are kept.
    eventually(lambda: process.written() >= 5000, "all 5000 bytes written")
    data, offset, _ = process.read(0, 1)
    assert len(data) == 1000 and offset == 5000


def test_a_stop_ends_the_whole_process_group_and_gives_the_exit_code(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time, pathlib\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    process = WorkerProcess(spec(tmp_path, code))
    data, _, _ = process.read(0, 30)
    assert b"ready" in data
    code_at_stop = process.stop(0.5)
    assert code_at_stop is not None and code_at_stop < 0
    child = int(pid_file.read_text())
    eventually(lambda: not _alive(child), "the worker's child to end")


def test_a_command_that_cannot_start_is_reported_not_raised(tmp_path: Path) -> None:
    process = WorkerProcess(spec(tmp_path, "") | {"argv": [str(tmp_path / "missing")]})
    out, exit_code = read_all(process)
    # The shim starts, the exec fails: the worker exits at once, saying why.
    assert exit_code != 0 and b"missing" in out


def test_a_load_balancing_workers_port_taken_on_the_node_is_replaced(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        busy = taken.getsockname()[1]
        code = "import os; print(os.environ['PORT'], os.environ['PORT_HEALTH'])"
        process = WorkerProcess(spec(tmp_path, code, port=busy, health_port=busy))
        out, _ = read_all(process)
    port, health = (int(p) for p in out.split())
    assert port == health != busy


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = os.popen(f"ps -o stat= -p {pid}").read().strip()
    return not stat.startswith("Z")


def test_the_exit_comes_although_a_child_left_in_its_group_holds_the_output_open(
    tmp_path: Path,
) -> None:
    # As the runpod SDK's heartbeat process would: alive after the worker, holding its stdout.
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('hi', flush=True)\n"
        "sys.exit(3)\n"
    )
    out, exit_code = read_all(WorkerProcess(spec(tmp_path, code)))
    assert (out, exit_code) == (b"hi\n", 3)


def test_a_restart_runs_the_command_again_and_only_the_last_exit_counts(tmp_path: Path) -> None:
    code = "import os, time; print('start', os.getpid(), flush=True); time.sleep(60)"
    process = WorkerProcess(spec(tmp_path, code, cwd=None))
    data, offset, _ = read_line_from(process, 0)
    assert data.startswith(b"start")
    assert process.restart(0.5) is None
    more, offset, code_now = read_line_from(process, offset)
    # The first process's end is not the actor's: no exit, the second one's output follows.
    assert more.startswith(b"start") and more != data and code_now is None
    process.stop(0.5)
    _, exit_code = read_all_from(process, offset)
    assert exit_code < 0
    # Once stopped, it is not started again.
    assert process.restart(0.5) == "it was stopped"


def test_a_restart_that_cannot_start_the_command_again_ends_the_actor_saying_why(
    tmp_path: Path,
) -> None:
    code = "import time; print('up', flush=True); time.sleep(60)"
    process = WorkerProcess(spec(tmp_path, code, cwd=None))
    _, offset, _ = process.read(0, 30)
    # Its home, where it runs, is gone.
    (tmp_path / "home").rmdir()
    problem = process.restart(0.5)
    assert problem is not None and "could not start again" in problem
    out, exit_code = read_all_from(process, offset)
    assert exit_code == 127 and b"could not start again" in out


class Reader:
    """What a process wrote from ``offset`` on, read a piece (up to 0.5 s) at a time."""

    def __init__(self, process: WorkerProcess, offset: int) -> None:
        self.process, self.offset = process, offset
        self.out = b""
        self.code: int | None = None

    def more(self) -> None:
        data, self.offset, self.code = self.process.read(self.offset, 0.5)
        self.out += data

    def so_far(self) -> str:
        return f"output so far: {self.out!r}"


def read_line_from(process: WorkerProcess, offset: int) -> tuple[bytes, int, int | None]:
    """Output up to its first newline: a print's pieces may come in several writes (under
    PYTHONUNBUFFERED, 'start' and ' 1234\\n' are two), and one read returns what is there."""
    reader = Reader(process, offset)

    def whole_line() -> bool:
        reader.more()
        return b"\n" in reader.out or reader.code is not None

    eventually(whole_line, "a whole line", context=reader.so_far)
    return reader.out, reader.offset, reader.code


def read_all_from(process: WorkerProcess, offset: int) -> tuple[bytes, int]:
    reader = Reader(process, offset)

    def exited() -> bool:
        reader.more()
        return reader.code is not None

    eventually(exited, "the process to exit", context=reader.so_far)
    assert reader.code is not None
    return reader.out, reader.code
