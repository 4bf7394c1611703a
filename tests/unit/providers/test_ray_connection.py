"""The Ray connection's check of the cluster's address at start: nothing answering is said at
once, in words, rather than left to Ray's own retries (minutes)."""

from __future__ import annotations

import socket

from skiff.providers.ray_cluster import _unreachable


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_address_nothing_answers_at_says_why() -> None:
    problem = _unreachable(f"127.0.0.1:{_closed_port()}", seconds=0.5)
    assert problem is not None and "refused" in problem.lower()


def test_an_address_that_answers_passes_in_either_form() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        assert _unreachable(f"127.0.0.1:{port}", seconds=0.5) is None
        assert _unreachable(f"ray://127.0.0.1:{port}", seconds=0.5) is None


def test_an_address_without_a_port_is_left_to_ray() -> None:
    assert _unreachable("auto", seconds=0.5) is None
