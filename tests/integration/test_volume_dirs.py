"""Network volumes' directories (volume_dirs.py): made for the user alone, measured as the
disk space their files take, removed whole."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from skiff.clock import ManualClock
from skiff.volume_dirs import FRESH_SECONDS, MEASURING_AT_ONCE, VolumeDirs


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_a_volume_directory_and_the_root_are_made_0700(tmp_path: Path) -> None:
    dirs = VolumeDirs(tmp_path / "volumes")
    path = dirs.make("vol-1")
    assert path == tmp_path / "volumes" / "vol-1" and dirs.exists("vol-1")
    assert mode(tmp_path / "volumes") == 0o700 and mode(path) == 0o700


def test_used_bytes_counts_allocated_blocks_of_files_in_every_folder(tmp_path: Path) -> None:
    dirs = VolumeDirs(tmp_path)
    path = dirs.make("vol-1")
    assert dirs.used_bytes("vol-1") == 0
    (path / "a" / "b").mkdir(parents=True)
    (path / "a" / "b" / "weights.bin").write_bytes(os.urandom(200_000))
    used = dirs.used_bytes("vol-1")
    assert used >= 200_000
    # A sparse file takes the blocks it holds, not its length.
    with open(path / "sparse", "wb") as f:
        f.truncate(1024**3)
    assert dirs.used_bytes("vol-1") < used + 1024**2


def test_a_hard_linked_file_counts_once_and_a_symlink_is_not_followed(tmp_path: Path) -> None:
    dirs = VolumeDirs(tmp_path / "volumes")
    path = dirs.make("vol-1")
    (path / "file").write_bytes(os.urandom(100_000))
    alone = dirs.used_bytes("vol-1")
    os.link(path / "file", path / "link")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(500_000))
    (path / "elsewhere").symlink_to(outside)
    assert dirs.used_bytes("vol-1") - alone < 100_000


def test_removing_takes_everything_and_a_second_time_is_harmless(tmp_path: Path) -> None:
    dirs = VolumeDirs(tmp_path)
    path = dirs.make("vol-1")
    (path / "deep" / "er").mkdir(parents=True)
    (path / "deep" / "er" / "f").write_text("x")
    dirs.remove("vol-1")
    assert not path.exists() and not dirs.exists("vol-1")
    dirs.remove("vol-1")
    assert dirs.used_bytes("vol-1") == 0


def test_free_bytes_makes_the_root_and_reads_its_disk(tmp_path: Path) -> None:
    dirs = VolumeDirs(tmp_path / "not-yet")
    assert dirs.free_bytes() > 0
    assert (tmp_path / "not-yet").is_dir()


async def test_only_so_many_volumes_are_measured_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = VolumeDirs(tmp_path / "volumes")
    for n in range(6):
        dirs.make(f"vol-{n}")
    walking, most = 0, 0
    measured = dirs.used_bytes

    def slow(volume_id: str) -> int:
        nonlocal walking, most
        walking += 1
        most = max(most, walking)
        time.sleep(0.05)
        walking -= 1
        return measured(volume_id)

    monkeypatch.setattr(dirs, "used_bytes", slow)
    owners = [f"user-{n}" for n in range(6)]
    measured_all = [dirs.measure(f"vol-{n}", owner) for n, owner in enumerate(owners)]
    assert await asyncio.gather(*measured_all) == [0] * 6
    assert most == MEASURING_AT_ONCE


class Walks:
    """``used_bytes`` made slow and counted, per volume."""

    def __init__(self, dirs: VolumeDirs, seconds: float) -> None:
        self.started: list[str] = []
        self._measured = dirs.used_bytes
        self._seconds = seconds

    def __call__(self, volume_id: str) -> int:
        self.started.append(volume_id)
        time.sleep(self._seconds)
        return self._measured(volume_id)


async def test_a_volume_asked_for_many_times_at_once_is_walked_once_and_its_figure_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock()
    dirs = VolumeDirs(tmp_path / "volumes", monotonic=clock.now)
    dirs.make("vol-a")
    walks = Walks(dirs, 0.05)
    monkeypatch.setattr(dirs, "used_bytes", walks)
    assert await asyncio.gather(*(dirs.measure("vol-a", "alice") for _ in range(40))) == [0] * 40
    assert walks.started == ["vol-a"]
    clock.advance(FRESH_SECONDS - 1)
    await dirs.measure("vol-a", "alice")
    assert walks.started == ["vol-a"]
    clock.advance(1)
    await dirs.measure("vol-a", "alice")
    assert walks.started == ["vol-a", "vol-a"]


async def test_one_owners_walks_leave_room_for_anothers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alice asks for ten volumes at once; Bob's one is walked beside her first, not after
    her ten."""
    dirs = VolumeDirs(tmp_path / "volumes")
    for n in range(10):
        dirs.make(f"alice-{n}")
    dirs.make("bob-0")
    walks = Walks(dirs, 0.05)
    monkeypatch.setattr(dirs, "used_bytes", walks)
    hers = [asyncio.create_task(dirs.measure(f"alice-{n}", "alice")) for n in range(10)]
    await asyncio.sleep(0.01)
    await dirs.measure("bob-0", "bob")
    assert walks.started.index("bob-0") <= 2
    await asyncio.gather(*hers)
