"""Which worker a file of an endpoint's log folder belongs to."""

from __future__ import annotations

import pytest

from skiff.domain.logs import worker_of_file


@pytest.mark.parametrize(
    ("name", "worker"),
    [
        ("w1.log", "w1"),
        ("w1.log.1", "w1"),
        ("w1.log.12", "w1"),
        ("w1.log.x", None),
        ("w1.txt", None),
        (".log", None),
        ("../w1.log", None),
        ("w1.log.1.log", None),
    ],
)
def test_a_log_and_its_rotated_files_name_their_worker(name: str, worker: str | None) -> None:
    assert worker_of_file(name) == worker
