"""The ports of load-balancing workers run as processes (served_ports.py), on this host's real
sockets: taken from just below the kernel's ephemeral range, free on every address, not handed
out again while a worker may still be about to bind it, and a clear error when none is left."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from skiff.served_ports import SPAN, ServedPortPool, reserved_ports


def test_the_ports_kept_are_the_span_below_the_ephemeral_range(tmp_path: Path) -> None:
    ephemeral = tmp_path / "ip_local_port_range"
    ephemeral.write_text("32768\t60999\n")
    assert reserved_ports(ephemeral) == range(32768 - SPAN, 32768)
    # Too little room above the privileged ports, or no figure: none kept.
    ephemeral.write_text("2000\t60999\n")
    assert reserved_ports(ephemeral) is None
    ephemeral.write_text("")
    assert reserved_ports(ephemeral) is None
    assert reserved_ports(tmp_path / "missing") is None


def free_block(size: int) -> range:
    """``size`` consecutive ports that nothing holds now, below the ephemeral range."""
    for start in range(21000, 22000, size):
        block = range(start, start + size)
        with ExitStack() as held:
            try:
                for port in block:
                    sock = held.enter_context(socket.socket())
                    sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        return block
    pytest.skip("no block of free ports found")


@pytest.fixture
def block() -> Iterator[range]:
    yield free_block(8)


def test_a_port_handed_out_is_free_and_not_handed_out_again_soon(block: range) -> None:
    pool = ServedPortPool(block, random.Random(7))
    taken = {pool.take() for _ in range(len(block))}
    # Every port once: none is bound yet, as a worker just started has not bound its own.
    assert taken == set(block)


def test_a_port_something_holds_is_not_handed_out(block: range) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", block[0]))
        pool = ServedPortPool(block, random.Random(7))
        assert block[0] not in {pool.take() for _ in range(len(block) - 1)}


def test_with_every_port_taken_the_error_says_which_were_kept(block: range) -> None:
    pool = ServedPortPool(block, random.Random(7))
    for _ in block:
        pool.take()
    with pytest.raises(OSError, match=f"no free port among the 8 kept .*{block[0]}-{block[-1]}"):
        pool.take()


def test_without_room_below_the_ephemeral_range_any_free_port_is_handed_out() -> None:
    port = ServedPortPool(None).take()
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", port))  # free, as the kernel picked it
