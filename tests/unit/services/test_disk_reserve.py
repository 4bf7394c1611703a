"""The room kept on the database's disk: new work refused under the reserve, the disk read at
most once a second on the injected clock, and what was admitted since counted in between."""

from __future__ import annotations

from pathlib import Path

import pytest

from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.errors import InsufficientStorage
from skiff.services.disk_reserve import (
    MIB,
    RETRY_AFTER_SECONDS,
    DiskReserve,
    ReserveMetrics,
    for_settings,
    job_bytes,
)


class Disk:
    """A disk whose free bytes the test sets, counting how often it is read."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.reads = 0
        self.broken = False

    def measure(self, path: Path) -> int:
        self.reads += 1
        if self.broken:
            raise OSError(5, "Input/output error")
        return self.free


def reserve_of(disk: Disk, clock: ManualClock, reserve: int = 100 * MIB) -> DiskReserve:
    return DiskReserve(Path("/data"), reserve, clock, disk.measure)


def test_work_is_admitted_while_the_disk_has_more_than_the_reserve_free() -> None:
    disk, clock = Disk(free=500 * MIB), ManualClock()
    reserve = reserve_of(disk, clock)
    reserve.admit(MIB)
    reserve.admit(MIB)
    assert disk.reads == 1  # read once for both: they came within the same second


def test_work_that_would_leave_less_than_the_reserve_is_refused_with_retry_after() -> None:
    disk, clock = Disk(free=100 * MIB + 10), ManualClock()
    reserve = reserve_of(disk, clock)
    with pytest.raises(InsufficientStorage) as refused:
        reserve.admit(11)
    assert refused.value.status_code == 507
    assert refused.value.retry_after == RETRY_AFTER_SECONDS
    assert "nothing of this request was kept" in refused.value.message
    reserve.admit(10)  # a smaller one still fits


def test_a_burst_between_two_reads_is_refused_as_it_reaches_the_reserve() -> None:
    disk, clock = Disk(free=110 * MIB), ManualClock()
    reserve = reserve_of(disk, clock)
    for _ in range(10):
        reserve.admit(MIB)
    # The disk still says 110 MiB (the writes have not landed yet): what was admitted counts.
    with pytest.raises(InsufficientStorage):
        reserve.admit(MIB)


def test_the_disk_is_read_again_after_a_second_and_space_freed_is_seen() -> None:
    disk, clock = Disk(free=50 * MIB), ManualClock()
    reserve = reserve_of(disk, clock)
    with pytest.raises(InsufficientStorage):
        reserve.admit(MIB)
    disk.free = 500 * MIB
    clock.advance(1.0)
    reserve.admit(MIB)
    assert disk.reads == 2


def test_a_refusal_reads_the_disk_again_rather_than_trust_an_old_figure() -> None:
    disk, clock = Disk(free=101 * MIB), ManualClock()
    reserve = reserve_of(disk, clock)
    reserve.admit(MIB // 2)
    disk.free = 500 * MIB  # freed within the second
    reserve.admit(MIB)  # the count says no; the disk, read again at once, says yes
    assert disk.reads == 2


def test_a_disk_that_cannot_be_read_refuses_nothing_and_is_read_again_a_second_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk, clock = Disk(free=0), ManualClock()
    disk.broken = True
    reserve = reserve_of(disk, clock)
    reserve.admit(MIB)
    reserve.admit(MIB)
    assert disk.reads == 1
    assert "cannot read the free space" in caplog.text
    disk.broken = False
    clock.advance(1.0)
    with pytest.raises(InsufficientStorage):
        reserve.admit(MIB)


def test_going_under_and_back_over_the_reserve_is_logged_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk, clock = Disk(free=50 * MIB), ManualClock()
    reserve = reserve_of(disk, clock)
    for _ in range(3):
        with pytest.raises(InsufficientStorage):
            reserve.admit(1)
        clock.advance(1.0)
    disk.free = 500 * MIB
    reserve.admit(1)
    reserve.admit(1)
    assert caplog.text.count("new jobs are refused") == 1
    assert caplog.text.count("room again") == 1


def test_a_job_counts_its_text_twice_and_its_row() -> None:
    assert job_bytes('{"a": 1}', None, None) == 8 * 1024 + 2 * 8
    assert job_bytes("x" * 10, "https://hook", "{}") == 8 * 1024 + 2 * (10 + 12 + 2)


def test_a_reserve_is_kept_only_for_the_embedded_database(tmp_path: Path) -> None:
    clock = ManualClock()
    assert for_settings(Settings(data_dir=tmp_path), clock) is not None
    assert for_settings(Settings(data_dir=tmp_path, disk_reserve_mb=0), clock) is None
    postgres = Settings(data_dir=tmp_path, database_url="postgresql://db/skiff")
    assert for_settings(postgres, clock) is None


def samples(reserve: DiskReserve) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in ReserveMetrics(reserve).collect()
        for sample in family.samples
    }


def test_the_metrics_show_the_free_bytes_read_now_the_reserve_and_the_refusals() -> None:
    disk, clock = Disk(free=50 * MIB), ManualClock()
    reserve = reserve_of(disk, clock)
    with pytest.raises(InsufficientStorage):
        reserve.admit(1)
    disk.free = 60 * MIB  # read again at the scrape, whatever the reserve last saw
    assert samples(reserve) == {
        "skiff_database_disk_free_bytes": 60 * MIB,
        "skiff_database_disk_reserve_bytes": 100 * MIB,
        "skiff_jobs_refused_for_room_total": 1,
    }


def test_a_disk_that_cannot_be_read_has_no_free_sample_rather_than_zero() -> None:
    disk = Disk(free=0)
    disk.broken = True
    shown = samples(reserve_of(disk, ManualClock()))
    assert "skiff_database_disk_free_bytes" not in shown
    assert shown["skiff_jobs_refused_for_room_total"] == 0
