"""The host ports that load-balancing workers run as processes serve on.

A process shares this host's network, so its ``PORT`` is a port of the host, handed out free
and bound by the worker a moment later. Were it any free port, another tenant's process could
be handed it in between by a ``bind`` to port 0 (which the sandbox allows: ``port_fence.py``),
by holding nearly all of the kernel's ephemeral range, and be sent the worker's requests. So
the ports come from the ``SPAN`` ports just below the ephemeral range, where a ``bind`` to port
0 never lands and which a pod run as a process may not declare (``local_pods.py``): in the
sandbox, no other tenant can bind them. A host whose ephemeral range leaves no such room hands
out any free port, as before.
"""

from __future__ import annotations

import errno
import random
import socket
from collections import deque
from pathlib import Path

from skiff.listen import free_port

#: The kernel's ephemeral range, ``low high``.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: How many ports below it are kept for the workers (with Linux's default range: 22768-32767).
SPAN = 10_000
#: Fewer than this between 1024 and the ephemeral range, and none are kept.
_LEAST = 1_000
#: A port handed out is not handed out again before this many others: its worker may not have
#: bound it yet.
_REMEMBERED = 1_024
_TRIES = 64


def reserved_ports(ephemeral_range: Path = EPHEMERAL_RANGE) -> range | None:
    """The ports kept for load-balancing workers on this host; None where there is no room."""
    try:
        low = int(ephemeral_range.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    ports = range(max(1024, low - SPAN), low)
    return ports if len(ports) >= _LEAST else None


def _free(port: int) -> bool:
    """Whether nothing holds ``port`` on any of this host's addresses."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


class ServedPortPool:
    """Hands out the ports of this host's load-balancing workers (the module's docstring)."""

    def __init__(self, ports: range | None, rng: random.Random | None = None) -> None:
        """``ports``: those kept (``reserved_ports``); None hands out any free port."""
        self._ports = ports
        self._rng = rng or random.Random()
        self._recent: deque[int] = deque(maxlen=_REMEMBERED)

    def take(self) -> int:
        """A free port for a worker to bind; OSError when the kept ones seem all taken."""
        if self._ports is None:
            return free_port()
        for _ in range(_TRIES):
            port = self._rng.choice(self._ports)
            if port not in self._recent and _free(port):
                self._recent.append(port)
                return port
        raise OSError(
            errno.EADDRINUSE,
            f"no free port among the {len(self._ports):,} kept for load-balancing workers "
            f"({self._ports.start}-{self._ports.stop - 1}) after {_TRIES} tries",
        )
