"""``SKIFF_PROVIDER=docker`` refuses a server its worker containers cannot reach (app.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skiff.app import containers_reach_server
from skiff.config import Settings


def docker_settings(tmp_path: Path, **fields: object) -> Settings:
    return Settings(data_dir=tmp_path, provider="docker", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "localhost", "::1"])
def test_a_docker_server_listening_on_the_loopback_only_is_refused_naming_skiff_host(
    tmp_path: Path, host: str
) -> None:
    with pytest.raises(ValueError, match=r"SKIFF_HOST") as refused:
        containers_reach_server(docker_settings(tmp_path, host=host))
    message = str(refused.value)
    assert "\n" not in message  # one Error: line
    assert f"listens on {host}" in message and "host.docker.internal" in message
    assert "0.0.0.0" in message and "SKIFF_PUBLIC_URL" in message


def test_a_loopback_public_url_does_not_help_either(tmp_path: Path) -> None:
    """A container still calls the host gateway for it."""
    with pytest.raises(ValueError, match=r"SKIFF_HOST"):
        containers_reach_server(docker_settings(tmp_path, public_url="http://localhost:8000"))


@pytest.mark.parametrize(
    "fields",
    [
        {"host": "0.0.0.0"},
        {"host": "::"},
        {"host": "172.17.0.1"},
        # The operator says where the server is reached (a proxy, the host's own name).
        {"public_url": "https://skiff.example.com"},
        {"public_url": "http://192.168.1.20:8000"},
    ],
)
def test_a_docker_server_its_containers_reach_starts(
    tmp_path: Path, fields: dict[str, object]
) -> None:
    containers_reach_server(docker_settings(tmp_path, **fields))


def test_workers_that_are_processes_of_this_host_reach_the_loopback(tmp_path: Path) -> None:
    containers_reach_server(Settings(data_dir=tmp_path, provider="local"))
