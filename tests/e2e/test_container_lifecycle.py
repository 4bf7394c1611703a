"""What the local provider does with a worker, the container provider does too
(``SKIFF_PROVIDER=docker``, the real runpod SDK inside the container): a cancelled running job
ends CANCELLED and its worker lets go of it or is replaced, and a flashboot endpoint keeps a
standby container that takes the first job and is held back again afterwards."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness import Server, running

from docker_image import (
    CONTAINER_SERVER_ENV,
    PYTHON_IN_IMAGE,
    SLEEPING_HANDLER,
    containers_of,
    docker_client,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("lifecycle") / "data", env=CONTAINER_SERVER_ENV) as server:
        yield server


def sleeping_endpoint(server: Server, image: str, **fields: Any) -> str:
    template = server.http.post(
        "/v1/templates",
        json={
            "name": f"sleeping-{time.monotonic_ns()}",
            "imageName": image,
            "dockerStartCmd": [PYTHON_IN_IMAGE, "-c", SLEEPING_HANDLER],
        },
    )
    assert template.status_code == 200, template.text
    created = server.http.post(
        "/v1/endpoints",
        json={"templateId": template.json()["id"], "computeType": "CPU", **fields},
    )
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def workers(server: Server, eid: str) -> list[dict[str, Any]]:
    found = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"}).json()
    return list(found["workers"])


def status(server: Server, eid: str, job_id: str) -> dict[str, Any]:
    return dict(server.http.get(f"/v2/{eid}/status/{job_id}").json())


def test_cancel_of_a_job_running_in_a_container_ends_it_and_frees_the_endpoint(
    server: Server, image: str
) -> None:
    eid = sleeping_endpoint(server, image, workersMax=1, idleTimeout=30)
    held = server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 600, "i": 0}}).json()["id"]
    server.wait_for(
        lambda: status(server, eid, held)["status"] == "IN_PROGRESS",
        timeout=90,
        what="the job to run in a container",
    )
    cancelled = server.http.post(f"/v2/{eid}/cancel/{held}")
    assert cancelled.json() == {"id": held, "status": "CANCELLED"}
    # One worker at most: the next job runs only once the container let go of the cancelled
    # one (or was ended and replaced), long before its 600 s are up.
    after = server.http.post(
        f"/v2/{eid}/runsync", json={"input": {"i": 1}}, params={"wait": 90000}, timeout=120
    ).json()
    assert after["status"] == "COMPLETED" and after["output"] == {"i": 1}, after
    assert status(server, eid, held)["status"] == "CANCELLED"
    server.http.delete(f"/v1/endpoints/{eid}")
    server.wait_for(lambda: containers_of(eid) == [], what="the endpoint's containers to go")


def test_a_flashboot_endpoint_keeps_a_standby_container_that_takes_the_first_job(
    server: Server, image: str
) -> None:
    eid = sleeping_endpoint(server, image, workersMax=2, idleTimeout=1, flashboot=True)
    standby = server.wait_for(
        lambda: [w for w in workers(server, eid) if w["state"] == "standby"],
        timeout=90,
        what="a standby worker",
    )
    # Recorded as standby as its start begins: its container follows.
    (container,) = server.wait_for(
        lambda: [c for c in containers_of(eid) if c.status == "running"],
        timeout=90,
        what="its container to run",
    )
    assert container.labels["dev.skiff.worker-id"] == standby[0]["id"]
    done = server.http.post(
        f"/v2/{eid}/runsync", json={"input": {"i": 7}}, params={"wait": 90000}, timeout=120
    ).json()
    assert done["status"] == "COMPLETED" and done["output"] == {"i": 7}, done
    # Promoted, not replaced: the standby container ran it.
    assert done["workerId"] == standby[0]["id"]
    server.wait_for(
        lambda: [w["state"] for w in workers(server, eid)] == ["standby"],
        timeout=60,
        what="one standby again",
    )
    server.wait_for(lambda: len(containers_of(eid)) == 1, what="one container again")
    server.http.patch(f"/v1/endpoints/{eid}", json={"flashboot": False})
    server.wait_for(lambda: workers(server, eid) == [], timeout=30, what="no standby")
    server.wait_for(lambda: containers_of(eid) == [], what="the standby container to go")
    server.http.delete(f"/v1/endpoints/{eid}")


def test_an_image_change_rolls_every_container_to_the_new_image_and_loses_no_job(
    server: Server, image: str
) -> None:
    """A rolling release on containers: two replicas of the worker on the image, the template
    moved to another image, a job running meanwhile finishes on its old container, and every
    container ends up on the new image."""
    repository = image.rsplit(":", 1)[0]
    rolled = f"{repository}:rolled"
    docker_client().images.get(image).tag(repository, "rolled")
    eid = sleeping_endpoint(server, image, workersMin=2, workersMax=2)
    try:

        def images() -> list[str]:
            return sorted(c.attrs["Config"]["Image"] for c in containers_of(eid))

        server.wait_for(
            lambda: [w["state"] for w in workers(server, eid)] == ["idle", "idle"],
            what="two idle containers",
        )
        assert images() == [image, image]
        busy = server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 4, "i": 1}}).json()
        server.wait_for(lambda: status(server, eid, busy["id"])["status"] == "IN_PROGRESS")
        endpoint = server.http.get(f"/v1/endpoints/{eid}").json()
        moved = server.http.patch(
            f"/v1/templates/{endpoint['templateId']}", json={"imageName": rolled}
        )
        assert moved.status_code == 200, moved.text
        assert server.http.get(f"/v1/endpoints/{eid}").json()["version"] == endpoint["version"] + 1
        queued = server.http.post(f"/v2/{eid}/run", json={"input": {"i": 2}}).json()

        server.wait_for(
            lambda: images() == [rolled, rolled], timeout=120, what="both containers rolled"
        )
        done = server.wait_for(
            lambda: (s := status(server, eid, busy["id"]))["status"] == "COMPLETED" and s,
            what="the job that ran through the change",
        )
        # Finished where it started: cut short and retried, it would have a retry count.
        assert done["output"] == {"i": 1} and not done.get("retries"), done
        server.wait_for(lambda: status(server, eid, queued["id"])["status"] == "COMPLETED")
        after = server.http.post(f"/v2/{eid}/runsync", json={"input": {"i": 3}}, timeout=60)
        assert after.json()["output"] == {"i": 3}
    finally:
        server.http.delete(f"/v1/endpoints/{eid}")
        docker_client().images.remove(rolled)
