"""One live server per data directory: the ``flock`` that ``skiff serve`` holds, on real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skiff.serve_lock import LOCK_NAME, AlreadyServing, lock_path_of_database, read_holder, take


def test_the_lock_records_its_holder_in_a_private_file(tmp_path: Path) -> None:
    lock = take([tmp_path / LOCK_NAME], "http://127.0.0.1:8000", tmp_path)
    try:
        holder = read_holder(tmp_path / LOCK_NAME)
        assert (holder.pid, holder.url, holder.data_dir) == (
            os.getpid(),
            "http://127.0.0.1:8000",
            str(tmp_path.resolve()),
        )
        assert (tmp_path / LOCK_NAME).stat().st_mode & 0o777 == 0o600
    finally:
        lock.release()


def test_a_second_taker_is_refused_with_the_running_servers_url_pid_and_data_dir(
    tmp_path: Path,
) -> None:
    # flock belongs to an open file: a second open in this process conflicts like another
    # process would.
    lock = take([tmp_path / LOCK_NAME], "http://127.0.0.1:8000", tmp_path)
    try:
        with pytest.raises(AlreadyServing) as refused:
            take([tmp_path / LOCK_NAME], "http://127.0.0.1:9000", tmp_path)
        assert str(refused.value).startswith(
            f"skiff is already running on http://127.0.0.1:8000 (pid {os.getpid()}) "
            f"with data directory {tmp_path.resolve()};"
        )
        # The refused taker did not overwrite the record.
        assert read_holder(tmp_path / LOCK_NAME).url == "http://127.0.0.1:8000"
    finally:
        lock.release()


def test_a_released_lock_can_be_taken_again(tmp_path: Path) -> None:
    take([tmp_path / LOCK_NAME], "http://a", tmp_path).release()
    lock = take([tmp_path / LOCK_NAME], "http://b", tmp_path)
    lock.release()
    assert read_holder(tmp_path / LOCK_NAME).url == "http://b"


def test_the_lock_dies_with_its_process_however_it_ends(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from skiff.serve_lock import take; "
            "take([Path(sys.argv[1]) / 'serve.lock'], 'http://x', Path(sys.argv[1])); "
            "print('held', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    with pytest.raises(AlreadyServing):
        take([tmp_path / LOCK_NAME], "http://y", tmp_path)
    holder.kill()
    holder.wait()
    take([tmp_path / LOCK_NAME], "http://y", tmp_path).release()


def test_a_database_outside_the_data_directory_is_locked_too(tmp_path: Path) -> None:
    database = tmp_path / "shared" / "skiff.db"
    database.parent.mkdir()
    first_dir, second_dir = tmp_path / "one", tmp_path / "two"
    first_dir.mkdir()
    second_dir.mkdir()
    lock = take(
        [first_dir / LOCK_NAME, lock_path_of_database(database)], "http://127.0.0.1:1", first_dir
    )
    try:
        with pytest.raises(AlreadyServing) as refused:
            take(
                [second_dir / LOCK_NAME, lock_path_of_database(database)],
                "http://127.0.0.1:2",
                second_dir,
            )
        assert f"on the database {database}" in str(refused.value)
        assert "http://127.0.0.1:1" in str(refused.value)
        # Nothing is kept of a refused attempt: its own data directory is free again.
        take([second_dir / LOCK_NAME], "http://127.0.0.1:3", second_dir).release()
    finally:
        lock.release()


def test_an_unreadable_record_still_gives_a_refusal(tmp_path: Path) -> None:
    lock = take([tmp_path / LOCK_NAME], "http://a", tmp_path)
    try:
        (tmp_path / LOCK_NAME).write_text("not json")
        with pytest.raises(AlreadyServing) as refused:
            take([tmp_path / LOCK_NAME], "http://b", tmp_path)
        assert str(refused.value).startswith(
            f"skiff is already running with data directory {tmp_path.resolve()};"
        )
    finally:
        lock.release()
