"""The listening socket is bound and listening before start-up; a taken port is refused."""

from __future__ import annotations

import socket

import pytest

from skiff.listen import CannotListen, listen


def test_a_port_in_use_is_refused_naming_the_address() -> None:
    first = listen("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        with pytest.raises(CannotListen) as refused:
            listen("127.0.0.1", port)
        assert str(refused.value) == (
            f"cannot listen on 127.0.0.1:{port}: the address is already in use "
            "(another skiff serve, or another program)"
        )
    finally:
        first.close()


def test_the_socket_accepts_connections_at_once_and_is_not_inherited() -> None:
    sock = listen("127.0.0.1", 0)
    try:
        assert not sock.get_inheritable()
        # Listening already: a client connects (it waits in the backlog until served).
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass
    finally:
        sock.close()


def test_an_address_that_is_not_this_hosts_is_refused_with_the_reason() -> None:
    with pytest.raises(CannotListen) as refused:
        listen("192.0.2.1", 0)  # TEST-NET-1: never an address of this host
    assert str(refused.value).startswith("cannot listen on 192.0.2.1:0: ")
