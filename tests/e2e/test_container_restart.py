"""A server on the container provider killed with SIGKILL and restarted on its data directory:
the containers of its earlier run are ended before it answers (they outlive a killed server,
unlike processes), a container of another server or of nobody is left running, and every job
it had accepted completes, the one a container held included."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from harness import Server

from docker_image import (
    CONTAINER_SERVER_ENV,
    PYTHON_IN_IMAGE,
    SLEEPING_HANDLER,
    docker_client,
)

ENV: dict[str, str | None] = {
    **CONTAINER_SERVER_ENV,
    # A job whose worker vanished without a record goes back to the queue this soon.
    "SKIFF_LEASE_SECONDS": "5",
}


@pytest.fixture
def foreign(image: str) -> Iterator[list[Any]]:
    """Two containers that are not this server's: one labelled by another skiff server (its
    own server identity and replica), one with no skiff label at all."""
    client = docker_client()
    marked = {
        "dev.skiff.worker": "1",
        "dev.skiff.worker-id": "w-of-another-server",
        "dev.skiff.endpoint-id": "ep-of-another-server",
        "dev.skiff.owner": "replica-of-another-server",
        "dev.skiff.server": "another-server",
        "dev.skiff.test": "1",
    }
    containers = [
        client.containers.run(image, ["sleep", "600"], detach=True, labels=labels)
        for labels in (marked, {"dev.skiff.test": "1"})
    ]
    try:
        yield containers
    finally:
        for container in containers:
            container.remove(force=True)


def workers_containers(worker_ids: set[str]) -> list[Any]:
    found = docker_client().containers.list(
        all=True, ignore_removed=True, filters={"label": "dev.skiff.worker=1"}
    )
    return [c for c in found if c.labels.get("dev.skiff.worker-id") in worker_ids]


def status(server: Server, eid: str, job_id: str) -> str:
    return str(server.http.get(f"/v2/{eid}/status/{job_id}").json()["status"])


def test_a_killed_server_ends_its_containers_at_restart_and_loses_no_job(
    tmp_path: Path, image: str, foreign: list[Any]
) -> None:
    server = Server(tmp_path / "data", env=ENV)
    server.start()
    try:
        template = server.http.post(
            "/v1/templates",
            json={
                "name": "slow",
                "imageName": image,
                "dockerStartCmd": [PYTHON_IN_IMAGE, "-c", SLEEPING_HANDLER],
            },
        )
        assert template.status_code == 200, template.text
        created = server.http.post(
            "/v1/endpoints",
            json={"templateId": template.json()["id"], "computeType": "CPU", "workersMax": 1},
        )
        assert created.status_code == 200, created.text
        eid = created.json()["id"]
        ids = [
            server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 3, "i": i}}).json()["id"]
            for i in range(3)
        ]
        server.wait_for(
            lambda: status(server, eid, ids[0]) == "IN_PROGRESS",
            timeout=90,
            what="a container to hold the first job",
        )
        workers = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"}).json()[
            "workers"
        ]
        old = {w["id"] for w in workers}
        assert workers_containers(old), "the worker runs in a container"
    finally:
        # SIGKILL: no shutdown runs, the container keeps running without its server.
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait()
        server.proc = None
    (held,) = workers_containers(old)
    assert held.status == "running"
    # A container of this server whose worker has no record any more (it was removed while its
    # container lived on): only its labels tell whose it is.
    recordless = docker_client().containers.run(
        image,
        ["sleep", "600"],
        detach=True,
        labels={**held.labels, "dev.skiff.worker-id": "w-without-record"},
    )
    old.add("w-without-record")

    restarted = Server(tmp_path / "data", port=server.port, env=ENV)
    restarted.start()
    try:
        # Ended before the restarted server answered, record or no record.
        assert workers_containers(old) == []
        with pytest.raises(docker.errors.NotFound):
            recordless.reload()
        for container in foreign:
            container.reload()
            assert container.status == "running"
        for job_id in ids:
            restarted.wait_for(
                lambda job_id=job_id: status(restarted, eid, job_id) == "COMPLETED",
                timeout=120,
                what=f"job {job_id} to complete after the restart",
            )
        outputs = [restarted.http.get(f"/v2/{eid}/status/{j}").json()["output"]["i"] for j in ids]
        assert outputs == [0, 1, 2]
    finally:
        restarted.stop()
        with contextlib.suppress(docker.errors.NotFound):
            recordless.remove(force=True)
    # A clean stop leaves no container of the endpoint behind either.
    assert (
        docker_client().containers.list(
            all=True, ignore_removed=True, filters={"label": f"dev.skiff.endpoint-id={eid}"}
        )
        == []
    )
