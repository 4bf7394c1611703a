"""What skiff creates on disk is the user's alone; a data directory open to others is closed
with a warning."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from skiff.datadir import (
    create_private_file,
    free_bytes,
    make_private_dir,
    make_private_dirs,
    private_opener,
)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_every_level_it_creates_is_0700(tmp_path: Path) -> None:
    make_private_dirs(tmp_path / "a" / "b" / "c")
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3


def test_existing_parents_are_left_as_they_are(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    make_private_dir(tmp_path / "data")
    assert mode(tmp_path) == 0o755
    assert mode(tmp_path / "data") == 0o700


def test_an_existing_data_directory_open_to_others_is_tightened_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    with caplog.at_level(logging.WARNING):
        make_private_dir(data)
    assert mode(data) == 0o700
    assert f"{data} was open to other users (mode 0755); made it private (mode 0700)" in (
        caplog.text
    )


def test_a_private_data_directory_gives_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        make_private_dir(tmp_path / "data")
        make_private_dir(tmp_path / "data")
    assert caplog.text == ""


def test_files_are_created_0600_and_existing_open_ones_tightened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    create_private_file(tmp_path / "new")
    assert mode(tmp_path / "new") == 0o600
    (tmp_path / "old").write_text("kept")
    os.chmod(tmp_path / "old", 0o644)
    with caplog.at_level(logging.WARNING):
        create_private_file(tmp_path / "old")
    assert mode(tmp_path / "old") == 0o600
    assert (tmp_path / "old").read_text() == "kept"
    assert "mode 0644" in caplog.text
    with open(tmp_path / "opened", "ab", opener=private_opener):
        pass
    assert mode(tmp_path / "opened") == 0o600


def test_the_free_space_is_what_an_unprivileged_writer_may_use(tmp_path: Path) -> None:
    stat = os.statvfs(tmp_path)
    # Root's reserved blocks left out: the server should not live on them. Other writers on
    # the machine may move the figure between the two reads, by far less than a GB.
    assert abs(free_bytes(tmp_path) - stat.f_bavail * stat.f_frsize) < 1024**3
