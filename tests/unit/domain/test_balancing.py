"""The pure rules of load-balancing endpoints: ports, ping answers, the pick, host names."""

from __future__ import annotations

import pytest

from skiff.domain.balancing import (
    DEFAULT_PORT,
    Candidate,
    PingAnswer,
    PortProblem,
    container_ports,
    endpoint_of_host,
    pick,
    ping_answer,
    separate_health_port,
)


def test_ports_default_to_80_and_health_to_the_port() -> None:
    assert container_ports({}) == (DEFAULT_PORT, DEFAULT_PORT) == (80, 80)
    assert container_ports({"PORT": "5000"}) == (5000, 5000)
    assert container_ports({"PORT": " 5000 ", "PORT_HEALTH": "5001"}) == (5000, 5001)
    assert container_ports({"PORT": ""}) == (80, 80)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"PORT": "http"}, "PORT must be a port number (1-65535), not 'http'"),
        ({"PORT": "0"}, "PORT must be a port number (1-65535), not 0"),
        ({"PORT": "65536"}, "PORT must be a port number (1-65535), not 65536"),
        ({"PORT_HEALTH": "-1"}, "PORT_HEALTH must be a port number (1-65535), not -1"),
    ],
)
def test_a_port_that_is_no_port_is_refused_naming_it(env: dict[str, str], said: str) -> None:
    with pytest.raises(PortProblem, match=said.replace("(", r"\(").replace(")", r"\)")):
        container_ports(env)


def test_a_process_gets_a_second_port_only_when_health_differs() -> None:
    assert not separate_health_port({})
    assert not separate_health_port({"PORT": "5000", "PORT_HEALTH": "5000"})
    assert separate_health_port({"PORT": "5000", "PORT_HEALTH": "5001"})


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (200, PingAnswer.READY),
        (204, PingAnswer.STARTING),
        (500, PingAnswer.FAILED),
        (503, PingAnswer.FAILED),
        (404, PingAnswer.FAILED),
        (None, PingAnswer.FAILED),
    ],
)
def test_ping_statuses(status: int | None, answer: PingAnswer) -> None:
    assert ping_answer(status) is answer


def test_the_pick_is_the_least_outstanding_then_the_longest_unpicked() -> None:
    assert pick([]) is None
    assert pick([Candidate("a", 3, 0.0), Candidate("b", 1, 9.0), Candidate("c", 2, 0.0)]) == "b"
    assert pick([Candidate("a", 1, 5.0), Candidate("b", 1, 2.0)]) == "b"


@pytest.mark.parametrize(
    ("host", "endpoint"),
    [
        ("abc123.lb.example.com", "abc123"),
        ("ABC123.LB.Example.com:8080", "abc123"),
        ("abc123.lb.example.com.", "abc123"),
        ("lb.example.com", None),
        ("x.abc123.lb.example.com", None),
        ("abc123.example.com", None),
        ("abc123.evil-lb.example.com", None),
        ("", None),
    ],
)
def test_the_endpoint_a_host_names(host: str, endpoint: str | None) -> None:
    assert endpoint_of_host(host, "lb.example.com") == endpoint
