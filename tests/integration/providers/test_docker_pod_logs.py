"""Whose log a container pod's output goes to, at its start, after a restart and when a
restarted server finds it again (real daemon, the test image): each time the log is opened for
the pod's owner, so that its output spends its user's pace (``LogSinks``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from docker_image import docker_client, ensure_test_image
from process_exits import Exits
from skiff.providers.base import PodLaunch
from skiff.providers.docker_pods import DockerPodProvider

SERVER = "server-pod-logs-test"


class Sink:
    def feed(self, data: bytes) -> float:
        return 0.0

    def close(self) -> None:
        pass


class Opened:
    """The logs a provider opened: (pod id, user id) each."""

    def __init__(self) -> None:
        self.logs: list[tuple[str, str | None]] = []

    def __call__(self, pod_id: str, _worker: str, user_id: str | None = None) -> Sink:
        self.logs.append((pod_id, user_id))
        return Sink()


@pytest.fixture
async def image() -> AsyncIterator[str]:
    client = docker_client()
    yield ensure_test_image()
    for container in client.containers.list(
        all=True, ignore_removed=True, filters={"label": f"dev.skiff.server={SERVER}"}
    ):
        container.remove(force=True)
    client.close()


async def test_a_pods_log_is_its_owners_at_start_restart_and_adoption(
    image: str, tmp_path: Path
) -> None:
    opened = Opened()
    first = DockerPodProvider(Exits(), logs=opened, server=SERVER, client=docker_client())
    await first.start(
        PodLaunch(
            pod_id="pod-logs",
            version=1,
            image=image,
            entrypoint=[],
            command=["/bin/sh", "-c", "exec sleep infinity"],
            env={},
            ports=(),
            volume=None,
            mount_path="/workspace",
            home=tmp_path / "pod-logs",
            user_id="u1",
        )
    )
    assert await first.restart("pod-logs", grace=0) is not None
    await first.close()  # the server goes; the container stays
    again = DockerPodProvider(Exits(), logs=opened, server=SERVER, client=docker_client())
    assert [p.pod_id for p in await again.adopt()] == ["pod-logs"]
    await again.close()
    assert opened.logs == [("pod-logs", "u1")] * 3
