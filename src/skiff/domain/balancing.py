"""Load-balancing endpoints, the pure part: which ports a worker serves on, which ready worker
takes the next request, and what ``GET /ping`` answers mean.

A load-balancing worker is its own HTTP server, as on the hosted platform: it listens on
``PORT`` and answers ``GET /ping`` on ``PORT_HEALTH`` (200 ready, 204 still initializing).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: A container's ``PORT`` when neither the template nor the endpoint sets one (the hosted
#: platform's default); ``PORT_HEALTH`` defaults to ``PORT``.
DEFAULT_PORT = 80


class PortProblem(ValueError):
    """``PORT`` or ``PORT_HEALTH`` is not a port number; the message says which and why."""


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise PortProblem(f"{name} must be a port number (1-65535), not {text!r}") from None
    if not 1 <= value <= 65535:
        raise PortProblem(f"{name} must be a port number (1-65535), not {value}")
    return value


def container_ports(env: Mapping[str, str]) -> tuple[int, int]:
    """(``PORT``, ``PORT_HEALTH``) inside a worker's container, from its environment."""
    port = _port(env, "PORT", DEFAULT_PORT)
    return port, _port(env, "PORT_HEALTH", port)


def separate_health_port(env: Mapping[str, str]) -> bool:
    """Whether the worker answers ``/ping`` on a port of its own (a process worker is then
    given two free ports instead of one)."""
    port, health = container_ports(env)
    return health != port


class PingAnswer(enum.Enum):
    READY = "ready"
    #: 204: up, but not ready for traffic yet (loading a model).
    STARTING = "starting"
    #: Anything else: an error status, a refused or reset connection, no answer in time.
    FAILED = "failed"


def ping_answer(status: int | None) -> PingAnswer:
    """What ``GET /ping``'s status means; None: no HTTP answer at all."""
    if status == 200:
        return PingAnswer.READY
    if status == 204:
        return PingAnswer.STARTING
    return PingAnswer.FAILED


@dataclass(frozen=True, slots=True)
class Candidate:
    """A ready worker as the balancer weighs it."""

    worker_id: str
    #: Requests this replica has in flight on it.
    outstanding: int
    #: When this replica last gave it a request (the loop's clock; older first on a tie).
    last_picked: float


def pick(candidates: Sequence[Candidate]) -> str | None:
    """Least outstanding requests; on a tie, the one that waited longest since its last
    request, so equal workers take turns."""
    if not candidates:
        return None
    return min(candidates, key=lambda c: (c.outstanding, c.last_picked)).worker_id


def endpoint_of_host(host: str, domain: str) -> str | None:
    """The endpoint id a ``Host`` names under ``domain`` (``abc123.lb.example.com`` ->
    ``abc123``), port and letter case aside; None when it names none."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.lower().rstrip(".")
    suffix = "." + domain.lower().strip(".")
    if not name.endswith(suffix):
        return None
    label = name[: -len(suffix)]
    if not label or "." in label:
        return None
    return label
