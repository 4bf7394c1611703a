"""The listening socket, bound before start-up.

uvicorn binds its port only after the application's start-up, so a server whose port is taken
used to run its whole start-up (sweeping workers, requeueing jobs) before it found out. Binding
(and listening) first makes a taken port fail before anything is touched; uvicorn then serves
on the socket it is given. Requests that arrive during start-up wait in the listen backlog.
"""

from __future__ import annotations

import errno
import socket

#: The default of uvicorn's ``backlog``.
BACKLOG = 2048


class CannotListen(Exception):
    """The address cannot be listened on (taken, not this host's, not allowed); the message
    says which and why."""


def listen(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    # The address family as uvicorn picks it: an IPv6 literal has a colon.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Lets a restarted server take its port back while old connections sit in TIME_WAIT;
        # on Linux it never lets two sockets listen on one address.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # Listening at once, not just bound: two sockets that only bound with SO_REUSEADDR
        # may share an address until one of them listens.
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        shown = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        reason = (
            "the address is already in use (another skiff serve, or another program)"
            if exc.errno == errno.EADDRINUSE
            else exc.strerror or str(exc)
        )
        raise CannotListen(f"cannot listen on {shown}: {reason}") from None
    # Never handed to a worker process (a worker keeping it would hold the port).
    sock.set_inheritable(False)
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, for a process that will bind it itself (a
    load-balancing worker's ``PORT``). Another program could take it first; the worker then
    fails to start and is replaced, with a fresh port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
