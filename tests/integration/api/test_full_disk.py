"""A nearly full and a full disk under the embedded database, on a real small file system (a
tmpfs mounted for the test, so it needs root; skipped otherwise): new jobs are refused with 507
and ``Retry-After`` while the jobs already accepted still finish and are recorded, and a write
that finds no room at all is answered 507, keeping nothing, rather than 500."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from in_process import running
from skiff.clock import ManualClock

MIB = 1024 * 1024
DISK_MIB = 48
RESERVE_MIB = 8


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(disk)], check=True
    )
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@contextlib.contextmanager
def filled(disk: Path, leave: int) -> Iterator[None]:
    """The disk filled by a file of its own until ``leave`` bytes are free; freed after."""
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    ballast = disk / "ballast"
    with ballast.open("wb") as out:
        os.posix_fallocate(out.fileno(), 0, max(0, free - leave))
    try:
        yield
    finally:
        ballast.unlink()


def big_input() -> dict[str, str]:
    # Larger than any free page the database file or its log could still reuse.
    return {"blob": "x" * (2 * MIB)}


async def test_new_jobs_are_refused_under_the_reserve_and_accepted_ones_still_finish(
    small_disk: Path,
) -> None:
    clock = ManualClock()
    async with running(small_disk / "data", clock=clock, disk_reserve_mb=RESERVE_MIB) as app:
        endpoint_id = (await app.create_endpoint(workersMax=0))["id"]
        accepted = await app.http.post(f"/v2/{endpoint_id}/run", json={"input": {"n": 1}})
        assert accepted.status_code == 200, accepted.text
        job_id = accepted.json()["id"]

        with filled(small_disk, leave=RESERVE_MIB * MIB // 2):
            clock.advance(1.0)  # the reserve reads the disk again
            refused = await app.http.post(f"/v2/{endpoint_id}/run", json={"input": {"n": 2}})
            assert refused.status_code == 507, refused.text
            assert refused.headers["Retry-After"] == "30"
            assert "nearly full" in refused.json()["error"]
            refused_sync = await app.http.post(
                f"/v2/{endpoint_id}/runsync", json={"input": {"n": 3}}
            )
            assert refused_sync.status_code == 507, refused_sync.text

            # The job accepted before goes on, its result recorded on the room kept.
            async with await app.worker(endpoint_id) as worker:
                taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0")
                assert taken.json()["id"] == job_id
                done = await worker.post(
                    f"/v2/{endpoint_id}/job-done/w-1/{job_id}?isStream=false",
                    json={"output": {"result": "y" * 100_000}},
                )
                assert done.status_code == 200, done.text
            status = (await app.http.get(f"/v2/{endpoint_id}/status/{job_id}")).json()
            assert status["status"] == "COMPLETED" and len(status["output"]["result"]) == 100_000
            health = (await app.http.get(f"/v2/{endpoint_id}/health")).json()
            assert health["jobs"]["completed"] == 1 and health["jobs"]["inQueue"] == 0
            shown = {
                sample.name: sample.value
                for family in text_string_to_metric_families((await app.http.get("/metrics")).text)
                for sample in family.samples
            }
            assert shown["skiff_jobs_refused_for_room_total"] == 2
            assert shown["skiff_database_disk_reserve_bytes"] == RESERVE_MIB * MIB
            assert shown["skiff_database_disk_free_bytes"] < RESERVE_MIB * MIB

        clock.advance(1.0)
        again = await app.http.post(f"/v2/{endpoint_id}/run", json={"input": {"n": 4}})
        assert again.status_code == 200, again.text


async def test_a_write_that_finds_the_disk_full_is_answered_507_and_keeps_nothing(
    small_disk: Path,
) -> None:
    async with running(small_disk / "data", disk_reserve_mb=0) as app:
        endpoint_id = (await app.create_endpoint(workersMax=0))["id"]
        with filled(small_disk, leave=0):
            refused = await app.http.post(f"/v2/{endpoint_id}/run", json={"input": big_input()})
            assert refused.status_code == 507, refused.text
            assert refused.headers["Retry-After"] == "30"
            assert "disk is full" in refused.json()["error"]
        health = (await app.http.get(f"/v2/{endpoint_id}/health")).json()
        assert health["jobs"]["inQueue"] == 0
        kept = await app.http.post(f"/v2/{endpoint_id}/run", json={"input": big_input()})
        assert kept.status_code == 200, kept.text
