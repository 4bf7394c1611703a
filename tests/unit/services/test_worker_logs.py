"""WorkerLogs: reading an endpoint's worker logs (filters, merge by time, rotated files) and
following them as they grow."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from skiff.domain.log_pace import PacesByUser
from skiff.domain.logs import parse_time, rotated, stamp
from skiff.services import log_reader
from skiff.services.log_writer import LogFile
from skiff.services.logs import WorkerLogs

T0 = 1_800_000_000.0


def write(path: Path, *lines: tuple[float | None, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        for ts, text in lines:
            f.write((stamp(ts) if ts is not None else b"") + text.encode() + b"\n")


def logs_with_two_workers(tmp_path: Path) -> WorkerLogs:
    folder = tmp_path / "logs" / "ep1"
    # Worker a rotated once: its older lines are in a.log.1.
    write(rotated(folder / "a.log", 1), (T0 + 0, "a0"), (T0 + 2, "a2"))
    write(folder / "a.log", (T0 + 4, "a4"), (T0 + 6, "a6"))
    write(folder / "b.log", (T0 + 1, "b1"), (T0 + 5, "b5"))
    write(tmp_path / "logs" / "other" / "c.log", (T0 + 3, "c3"))
    return WorkerLogs(tmp_path)


def test_all_workers_are_merged_by_time_rotated_files_first(tmp_path: Path) -> None:
    logs = logs_with_two_workers(tmp_path)
    lines = logs.read("ep1")
    assert [line.line for line in lines] == ["a0", "b1", "a2", "a4", "b5", "a6"]
    assert [line.worker for line in lines] == ["a", "b", "a", "a", "b", "a"]
    assert lines[0].time == T0
    assert logs.workers("ep1") == ["a", "b"]


def test_worker_since_and_tail_filter(tmp_path: Path) -> None:
    logs = logs_with_two_workers(tmp_path)
    assert [x.line for x in logs.read("ep1", worker_id="a")] == ["a0", "a2", "a4", "a6"]
    assert [x.line for x in logs.read("ep1", since=T0 + 2)] == ["a2", "a4", "b5", "a6"]
    assert [x.line for x in logs.read("ep1", tail=3)] == ["a4", "b5", "a6"]
    assert [x.line for x in logs.read("ep1", worker_id="a", since=T0 + 1, tail=2)] == [
        "a4",
        "a6",
    ]
    assert logs.last_lines("ep1", "b", 1) == ["b5"]


def test_a_read_holds_the_newest_lines_that_fit_however_many_workers_and_long_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant's workers can fill their logs with the longest lines: one read returns at most
    ``MAX_READ_CHARS`` of text, the newest, and never holds much more than that."""
    monkeypatch.setattr(log_reader, "MAX_READ_CHARS", 10_000)
    folder = tmp_path / "logs" / "ep1"
    for w in range(20):
        write(
            folder / f"w{w}.log", *((T0 + i * 20 + w, f"{w}:{i}:" + "x" * 4000) for i in range(10))
        )
    held: list[int] = []
    push = log_reader.heapq.heappush

    def counted(heap: list[Any], item: Any) -> None:
        push(heap, item)
        held.append(sum(entry[1] for entry in heap))

    monkeypatch.setattr(log_reader.heapq, "heappush", counted)
    lines = WorkerLogs(tmp_path).read("ep1", tail=1000)
    assert [x.line.split(":")[:2] for x in lines] == [["18", "9"], ["19", "9"]]
    assert max(held) <= 10_000 + 4010  # the budget, and the one line that pushes it over


def test_unknown_or_unsafe_names_read_nothing(tmp_path: Path) -> None:
    logs = logs_with_two_workers(tmp_path)
    assert logs.read("ep1", worker_id="nope") == []
    assert logs.read("ep1", worker_id="../other/c") == []
    assert logs.read("..", worker_id="other") == []
    assert logs.read("missing") == []
    assert not logs.has_log("ep1", "../other/c")


def test_unstamped_lines_keep_their_place_and_fail_a_since_filter(tmp_path: Path) -> None:
    folder = tmp_path / "logs" / "ep1"
    write(folder / "a.log", (None, "old format"), (T0 + 1, "a1"), (None, "  traceback line"))
    write(folder / "b.log", (T0 + 0, "b0"), (T0 + 2, "b2"))
    logs = WorkerLogs(tmp_path)
    merged = logs.read("ep1")
    assert [x.line for x in merged] == ["old format", "b0", "a1", "  traceback line", "b2"]
    assert merged[0].time is None
    assert [x.line for x in logs.read("ep1", worker_id="a", since=T0)] == ["a1"]


def test_a_big_log_is_read_from_its_end(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "ep1" / "a.log"
    write(path, *((T0 + i, f"line {i} " + "z" * 200) for i in range(5000)))
    lines = WorkerLogs(tmp_path).read("ep1", tail=2)
    assert [x.line.split()[1] for x in lines] == ["4998", "4999"]


def test_a_line_still_being_written_is_not_read_yet(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "ep1" / "a.log"
    write(path, (T0, "whole"))
    with open(path, "ab") as f:
        f.write(stamp(T0 + 1) + b"hal")
    logs = WorkerLogs(tmp_path)
    assert [x.line for x in logs.read("ep1")] == ["whole"]
    with logs.follow("ep1") as follower:
        assert [x.line for x in follower.backlog()] == ["whole"]
        with open(path, "ab") as f:
            f.write(b"f\n")
        assert [x.line for x in follower.poll()] == ["half"]


def test_a_follower_sees_new_lines_rotations_and_new_workers(tmp_path: Path) -> None:
    folder = tmp_path / "logs" / "ep1"
    folder.mkdir(parents=True)
    a = LogFile(folder / "a.log", max_bytes=200, backups=5)
    a.write([b"before 1", b"before 2"], T0)
    logs = WorkerLogs(tmp_path)
    with logs.follow("ep1") as follower:
        # Written after the follower started but before its backlog was read: not in the
        # backlog, in the first poll, once.
        a.write([b"after 1"], T0 + 1)
        assert [x.line for x in follower.backlog(tail=10)] == ["before 1", "before 2"]
        assert [x.line for x in follower.poll()] == ["after 1"]
        assert follower.poll() == []
        # Enough to rotate a few times between two polls: nothing is missed.
        a.write([f"burst {i}".encode() for i in range(12)], T0 + 2)
        assert rotated(folder / "a.log", 1).exists()
        b = LogFile(folder / "b.log", max_bytes=200, backups=5)
        b.write([b"b starts"], T0 + 3)
        polled = follower.poll()
        assert [x.line for x in polled] == [*(f"burst {i}" for i in range(12)), "b starts"]
        assert polled[-1].worker == "b"
        a.write([b"after rotation"], T0 + 4)
        assert [x.line for x in follower.poll()] == ["after rotation"]
        a.close()
        b.close()


def test_a_follower_of_one_worker_ignores_the_others(tmp_path: Path) -> None:
    logs = logs_with_two_workers(tmp_path)
    with logs.follow("ep1", "b") as follower:
        assert [x.line for x in follower.backlog()] == ["b1", "b5"]
        write(tmp_path / "logs" / "ep1" / "a.log", (T0 + 7, "a7"))
        write(tmp_path / "logs" / "ep1" / "b.log", (T0 + 8, "b8"))
        assert [x.line for x in follower.poll()] == ["b8"]


def test_times_are_read_as_iso_8601_or_epoch_seconds() -> None:
    assert parse_time("1800000000.5") == 1_800_000_000.5
    assert parse_time("2027-01-15T08:00:00Z") == parse_time("2027-01-15T08:00:00")
    assert parse_time("2027-01-15T09:00:00+01:00") == parse_time("2027-01-15T08:00:00Z")
    for bad in ("yesterday", "nan", "inf", ""):
        try:
            parse_time(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")


def _ended_log(folder: Path, worker: str, size: int, mtime: float, rotations: int = 0) -> None:
    """A worker's log of ``size`` bytes in all (split over its rotated files), last written
    at ``mtime``."""
    paths = [folder / f"{worker}.log"] + [
        rotated(folder / f"{worker}.log", n) for n in range(1, rotations + 1)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    for path in paths:
        path.write_bytes(b"x" * (size // len(paths)))
        os.utime(path, (mtime, mtime))


def test_ended_workers_logs_past_the_budget_go_oldest_first(tmp_path: Path) -> None:
    folder = tmp_path / "logs" / "ep1"
    _ended_log(folder, "old", 400, T0, rotations=2)
    _ended_log(folder, "mid", 400, T0 + 10)
    _ended_log(folder, "new", 400, T0 + 20)
    _ended_log(folder, "live", 5000, T0 - 100)  # still running: never counted, never removed
    (folder / "notes.txt").write_text("not a log")

    removed = WorkerLogs(tmp_path).prune_ended(["ep1"], {"live"}, keep_bytes=800, keep_workers=10)

    assert removed == ["old"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "live.log",
        "mid.log",
        "new.log",
        "notes.txt",
    ]


def test_the_newest_ended_workers_log_is_kept_whatever_its_size(tmp_path: Path) -> None:
    folder = tmp_path / "logs" / "ep1"
    _ended_log(folder, "older", 10, T0)
    _ended_log(folder, "newest", 10_000, T0 + 1, rotations=1)

    assert WorkerLogs(tmp_path).prune_ended(["ep1"], set(), keep_bytes=0, keep_workers=10) == [
        "older"
    ]
    assert sorted(p.name for p in folder.iterdir()) == ["newest.log", "newest.log.1"]


def test_one_budget_holds_the_ended_logs_of_all_the_endpoints_given(tmp_path: Path) -> None:
    # A user's endpoints: a tenant making more of them gets no more room on the disk.
    _ended_log(tmp_path / "logs" / "ep1", "old", 400, T0)
    _ended_log(tmp_path / "logs" / "ep2", "mid", 400, T0 + 10)
    _ended_log(tmp_path / "logs" / "ep3", "new", 400, T0 + 20)
    _ended_log(tmp_path / "logs" / "other-users", "oldest", 400, T0 - 10)

    logs = WorkerLogs(tmp_path)
    assert logs.prune_ended(
        ["ep1", "ep2", "ep3", "gone"], set(), keep_bytes=800, keep_workers=10
    ) == ["old"]
    assert not logs.log_path("ep1", "old").exists()
    assert logs.log_path("ep2", "mid").exists() and logs.log_path("ep3", "new").exists()
    assert logs.log_path("other-users", "oldest").exists()


def test_no_more_ended_workers_logs_are_kept_than_the_count_allows(tmp_path: Path) -> None:
    # A crash loop's logs, a few bytes each: the byte budget alone would keep them all.
    for n in range(6):
        _ended_log(tmp_path / "logs" / f"ep{n % 2}", f"w{n}", 10, T0 + n)
    _ended_log(tmp_path / "logs" / "ep0", "live", 10, T0 - 1)

    logs = WorkerLogs(tmp_path)
    removed = logs.prune_ended(["ep0", "ep1"], {"live"}, keep_bytes=10**9, keep_workers=3)
    assert sorted(removed) == ["w0", "w1", "w2"]
    assert sorted(logs.workers("ep0") + logs.workers("ep1")) == ["live", "w3", "w4", "w5"]
    # None kept but the newest, which always is.
    assert logs.prune_ended(["ep0", "ep1"], {"live"}, keep_bytes=10**9, keep_workers=0) == [
        "w4",
        "w3",
    ]


def test_pruning_an_endpoint_without_logs_removes_nothing(tmp_path: Path) -> None:
    assert WorkerLogs(tmp_path).prune_ended(["ep1"], set(), keep_bytes=0, keep_workers=0) == []


def test_a_paced_log_keeps_every_line_and_tells_its_copier_to_wait(tmp_path: Path) -> None:
    now = [0.0]
    logs = WorkerLogs(tmp_path, bytes_per_second=1000, burst_bytes=2000, monotonic=lambda: now[0])
    sink = logs.sink("ep1", "w1")
    line = b"x" * 99 + b"\n"
    assert sink.feed(line * 20) == 0.0  # 2,000 bytes: the burst
    assert sink.feed(line * 5) == pytest.approx(0.5)
    now[0] += 0.5
    assert sink.feed(line) == pytest.approx(0.1)
    sink.close()
    assert len(logs.log_path("ep1", "w1").read_bytes().splitlines()) == 26


def test_an_unpaced_log_never_asks_to_wait(tmp_path: Path) -> None:
    sink = WorkerLogs(tmp_path).sink("ep1", "w1")
    assert sink.feed(b"y" * 10_000_000 + b"\n") == 0.0
    sink.close()


def test_a_users_logs_share_one_pace_besides_their_own(tmp_path: Path) -> None:
    now = [0.0]
    logs = WorkerLogs(
        tmp_path,
        bytes_per_second=1000,
        burst_bytes=1000,
        user_paces=PacesByUser(rate=1000, burst=1500),
        monotonic=lambda: now[0],
    )
    a = logs.sink("ep1", "a", "alice")
    b = logs.sink("ep2", "b", "alice")
    other = logs.sink("ep3", "c", "bob")
    line = b"x" * 99 + b"\n"
    assert a.feed(line * 10) == 0.0  # within its own burst and alice's
    # Within b's own burst, past what alice has left: b waits for alice's pace.
    assert b.feed(line * 10) == pytest.approx(0.5)
    assert other.feed(line * 10) == 0.0  # bob's pace is his own
    for sink in (a, b, other):
        sink.close()
