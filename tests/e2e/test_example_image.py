"""docs/containers.md, "In a container": ``examples/Dockerfile`` builds the example workers into an
image that skiff runs unchanged as containers (``SKIFF_PROVIDER=docker``). The build is the
page's offline one: a base from Debian's packages (the container tests' own base image) and
wheels fetched on the host, as where Docker Hub cannot be reached; with it, the only
difference is ``--build-arg BASE``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Server, running

from docker_image import CONTAINER_SERVER_ENV, docker_client

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TAG = "skiff-test/example:latest"
#: The base the container tests' image is built on (tests/containers/build-test-image).
DEBIAN_BASE = "skiff-test/python:3.11"


@pytest.fixture(scope="module")
def example_image(image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """examples/Dockerfile built as the README says for a machine without Docker Hub."""
    docker_client()
    context = tmp_path_factory.mktemp("example-image") / "examples"
    shutil.copytree(EXAMPLES, context, ignore=shutil.ignore_patterns("__pycache__", "wheels"))
    subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
            "--python-version", "3.11", "--platform", "manylinux2014_x86_64",
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64",
            "--platform", "any", "-d", str(context / "wheels"),
            "-r", str(context / "requirements.txt"),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    build = subprocess.run(
        [
            "docker", "build", "--quiet", "-t", TAG,
            "--build-arg", f"BASE={DEBIAN_BASE}",
            "--build-arg", "PIP_OPTIONS=--no-index --find-links /app/wheels",
            str(context),
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    return TAG


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, example_image: str) -> Iterator[Server]:
    with running(
        tmp_path_factory.mktemp("example-image") / "data", env=CONTAINER_SERVER_ENV
    ) as server:
        yield server


def endpoint(server: Server, image: str, **fields: object) -> str:
    template = server.http.post(
        "/v1/templates",
        json={"name": f"example-{len(fields)}", "imageName": image, "category": "CPU", **fields},
    )
    assert template.status_code == 200, template.text
    body: dict[str, object] = {"templateId": template.json()["id"], "computeType": "CPU"}
    if fields.get("dockerStartCmd") == ["python", "/app/lb_worker.py"]:
        body["type"] = "LB"
    created = server.http.post("/v1/endpoints", json=body)
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def test_the_example_image_runs_its_own_command_as_a_queue_worker(
    server: Server, example_image: str
) -> None:
    eid = endpoint(server, example_image)
    answer = server.http.post(
        f"/v2/{eid}/runsync", json={"input": {"name": "container"}}, timeout=120
    ).json()
    assert answer["status"] == "COMPLETED", (answer, server.tail_log())
    assert answer["output"] == {"greeting": "hello, container"}


def test_the_example_image_serves_the_load_balancing_example(
    server: Server, example_image: str
) -> None:
    eid = endpoint(server, example_image, dockerStartCmd=["python", "/app/lb_worker.py"])
    answer = server.http.post(f"/lb/{eid}/generate", json={"prompt": "skiff"}, timeout=120)
    assert answer.status_code == 200, (answer.text, server.tail_log())
    assert answer.json()["text"] == "ffiks"
