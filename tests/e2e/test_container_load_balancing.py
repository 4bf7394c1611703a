"""A load-balancing endpoint whose workers are containers (``SKIFF_PROVIDER=docker``): the
FastAPI worker of ``workers/lb_worker.py`` runs in the test image on the ports its template
names, published on the host's loopback only, and requests reach it through skiff."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from harness import WORKERS, Server, running

from docker_image import CONTAINER_SERVER_ENV, containers_of


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[Server]:
    with running(
        tmp_path_factory.mktemp("lb-containers") / "data", env=CONTAINER_SERVER_ENV
    ) as srv:
        yield srv


def container_lb_endpoint(
    server: Server, image: str, env: dict[str, str], **fields: Any
) -> dict[str, Any]:
    template = server.create_template(
        "lb_worker.py",
        imageName=image,
        dockerStartCmd=["/opt/venv/bin/python", "-c", (WORKERS / "lb_worker.py").read_text()],
        env=env,
    )
    response = server.http.post(
        "/v1/endpoints",
        json={
            "templateId": template["id"],
            "computeType": "CPU",
            "type": "LB",
            "idleTimeout": 30,
            **fields,
        },
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_container_worker_serves_on_its_templates_ports(server: Server, image: str) -> None:
    endpoint = container_lb_endpoint(server, image, {"PORT": "8000", "PORT_HEALTH": "8001"})

    answer = server.http.post(f"/lb/{endpoint['id']}/generate", json={"prompt": "in a box"})

    assert answer.status_code == 200, answer.text
    assert answer.json()["prompt"] == "in a box"
    [container] = containers_of(endpoint["id"])
    ports = container.attrs["NetworkSettings"]["Ports"]
    # Both ports published, on the loopback only: callers go through skiff's key check.
    assert {p: [b["HostIp"] for b in ports[p]] for p in ("8000/tcp", "8001/tcp")} == {
        "8000/tcp": ["127.0.0.1"],
        "8001/tcp": ["127.0.0.1"],
    }
    logs = server.http.get(f"/v1/endpoints/{endpoint['id']}/logs").text
    assert "listening on 8000 (health 8001)" in logs


def test_a_container_worker_without_ports_listens_on_port_80(server: Server, image: str) -> None:
    endpoint = container_lb_endpoint(server, image, {})

    answer = server.http.get(f"/lb/{endpoint['id']}/stream", params={"n": 2, "pause": 0})

    assert answer.status_code == 200, answer.text
    assert answer.text == "data: 0\n\ndata: 1\n\n"
    [container] = containers_of(endpoint["id"])
    assert "80/tcp" in container.attrs["NetworkSettings"]["Ports"]


def test_a_port_that_is_no_port_is_the_endpoints_worker_failure(server: Server, image: str) -> None:
    endpoint = container_lb_endpoint(server, image, {"PORT": "eighty"}, workersMin=1)

    server.wait_for(
        lambda: server.http.get(f"/v1/endpoints/{endpoint['id']}").json().get("lastWorkerFailure"),
        what="a worker failure",
    )
    failure = server.http.get(f"/v1/endpoints/{endpoint['id']}").json()["lastWorkerFailure"]
    assert "PORT must be a port number (1-65535), not 'eighty'" in failure["error"]
    assert containers_of(endpoint["id"]) == []
