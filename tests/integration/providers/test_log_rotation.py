"""The local provider keeps each worker's output: stamped lines, a capped file rotated into
``.log.1`` … ``.log.N``, the last lines kept after the worker ends (real subprocesses)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from skiff.domain.logs import MAX_LINE_BYTES, STAMP_LEN, parse, rotated
from skiff.providers.base import Launch
from skiff.providers.local import LocalProvider
from skiff.services.log_writer import LogFile
from skiff.services.logs import WorkerLogs


class Exits:
    """The provider's exit callback; records what the log held when it was called."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.done = asyncio.Event()
        self.code: int | None = None
        self.log_at_exit = b""

    async def __call__(self, worker_id: str, code: int) -> None:
        self.code = code
        self.log_at_exit = self.log_path.read_bytes()
        self.done.set()


def launch(tmp_path: Path, code: str) -> Launch:
    return Launch(
        worker_id="w1",
        endpoint_id="ep1",
        argv=[sys.executable, "-c", code],
        env=dict(os.environ),
        home=tmp_path / "home",
    )


async def run_worker(
    tmp_path: Path, code: str, max_bytes: int = 10 * 1024 * 1024, backups: int = 2
) -> tuple[Exits, Path]:
    spec = launch(tmp_path, code)
    logs = WorkerLogs(tmp_path, max_bytes, backups)
    log_path = logs.log_path(spec.endpoint_id, spec.worker_id)
    exits = Exits(log_path)
    provider = LocalProvider(exits, logs=logs.sink)
    await provider.start(spec)
    await asyncio.wait_for(exits.done.wait(), 30)
    return exits, log_path


def texts(path: Path) -> list[str]:
    return [parse(raw)[1] for raw in path.read_bytes().splitlines()]


async def test_output_is_rotated_at_the_cap_and_the_oldest_files_dropped(tmp_path: Path) -> None:
    cap = 4096
    exits, log = await run_worker(
        tmp_path, "for i in range(3000): print(f'line {i:05d}')", max_bytes=cap, backups=2
    )
    assert exits.code == 0
    files = sorted(p.name for p in log.parent.iterdir())
    assert files == ["w1.log", "w1.log.1", "w1.log.2"]
    longest = STAMP_LEN + len("line 00000") + 1
    for path in (log, rotated(log, 1), rotated(log, 2)):
        assert 0 < path.stat().st_size <= cap + longest
    # Oldest first across the files, contiguous, ending with the last line printed.
    kept = texts(rotated(log, 2)) + texts(rotated(log, 1)) + texts(log)
    first = int(kept[0].split()[1])
    assert first > 0, "what did not fit in the backups is dropped"
    assert kept == [f"line {i:05d}" for i in range(first, 3000)]


async def test_lines_are_stamped_and_the_last_one_is_kept_before_the_exit_is_reported(
    tmp_path: Path,
) -> None:
    code = "import sys; print('hello'); sys.stderr.write('dying without a newline'); sys.exit(3)"
    exits, log = await run_worker(tmp_path, code)
    assert exits.code == 3
    # The exit callback already saw everything the worker wrote.
    assert exits.log_at_exit == log.read_bytes()
    lines = [parse(raw) for raw in exits.log_at_exit.splitlines()]
    assert [text for _ts, text in lines] == ["hello", "dying without a newline"]
    assert all(ts is not None for ts, _text in lines)


async def test_a_long_line_is_cut_into_pieces(tmp_path: Path) -> None:
    size = 2 * MAX_LINE_BYTES + 100
    exits, log = await run_worker(tmp_path, f"print('x' * {size}); print('after')")
    assert exits.code == 0
    assert [len(t) for t in texts(log)] == [MAX_LINE_BYTES, MAX_LINE_BYTES, 100, 5]


async def test_a_big_burst_is_kept_whole_within_the_cap(tmp_path: Path) -> None:
    # 8 MB as fast as the worker can write it: the pipe slows the worker, nothing is lost.
    code = "import sys\nline = 'y' * 99 + '\\n'\nsys.stdout.write(line * 80_000)\nprint('end')"
    exits, log = await run_worker(tmp_path, code, max_bytes=64 * 1024 * 1024)
    assert exits.code == 0
    kept = texts(log)
    assert len(kept) == 80_001 and kept[-1] == "end"


async def test_an_escaped_child_holding_the_pipe_does_not_hold_the_exit(tmp_path: Path) -> None:
    # The child starts its own session, so killing the worker's group does not reach it, and it
    # keeps the pipe open: the exit is reported anyway, after a short wait.
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
    )
    started = asyncio.get_running_loop().time()
    exits, log = await run_worker(tmp_path, code)
    try:
        assert exits.code == 0
        assert asyncio.get_running_loop().time() - started < 10
    finally:
        os.kill(int(texts(log)[0]), signal.SIGKILL)


def test_without_backups_the_file_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    log = LogFile(path, max_bytes=100, backups=0)
    for i in range(10):
        log.write([f"line {i}".encode()], 0.0)
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.log"]
    assert texts(path)[-1] == "line 9"
    assert path.stat().st_size <= 100


def test_a_line_above_the_cap_gets_a_file_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    log = LogFile(path, max_bytes=50, backups=3)
    log.write([b"a", b"b" * 200, b"c"], 0.0)
    log.close()
    assert texts(rotated(path, 2)) == ["a"]
    assert texts(rotated(path, 1)) == ["b" * 200]
    assert texts(path) == ["c"]


def test_a_removed_folder_turns_the_log_off(tmp_path: Path) -> None:
    folder = tmp_path / "ep"
    folder.mkdir()
    log = LogFile(folder / "w.log", max_bytes=30, backups=1)
    (folder / "w.log").unlink()
    folder.rmdir()
    # Rotation fails, the rest is dropped, nothing raises and nothing recreates the folder.
    log.write([b"x" * 20, b"y" * 20, b"z" * 20], 0.0)
    log.close()
    assert not folder.exists()
