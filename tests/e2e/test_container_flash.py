"""runpod-flash's functions on the Docker provider: a Flash endpoint's worker is a container of
skiff's Flash worker image (``images/flash-worker``, ``SKIFF_FLASH_IMAGE``) instead of the hosted
``runpod/flash`` image, installing its pip dependency inside the container from a package index
the container reaches on the host."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Server, running

import flash_programs as flash
from docker_image import CONTAINER_SERVER_ENV, containers_of, ensure_flash_image

SCRIPT = """
import asyncio, json, os
from runpod_flash import Endpoint

ENV = json.loads(os.environ["WORKER_ENV"])


@Endpoint(name="in-a-box", cpu="cpu3c-2-4", dependencies=["skiffwords==1.0"], env=ENV)
async def describe(n):
    import skiffwords, pathlib
    return [skiffwords.intword(n), pathlib.Path("/opt/skiff/skiff_flash_worker").is_dir()]


@Endpoint(name="in-a-box", cpu="cpu3c-2-4", dependencies=["skiffwords==1.0"], env=ENV)
def fails():
    raise RuntimeError("inside the container")


@Endpoint(name="in-a-box", cpu="cpu3c-2-4", dependencies=["skiffwords==1.0"], env=ENV)
class Tally:
    def __init__(self, start):
        self.n = start

    def add(self, k):
        self.n += k
        return self.n


async def main():
    out = {"first": await describe(1234567), "second": await describe(12)}
    tally = Tally(10)
    out["tally"] = [await tally.add(1), await tally.add(5)]
    try:
        await fails()
    except Exception as exc:
        out["error"] = str(exc)
    print(json.dumps(out))


asyncio.run(main())
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = CONTAINER_SERVER_ENV | {"SKIFF_FLASH_IMAGE": ensure_flash_image()}
    with running(tmp_path_factory.mktemp("flash-docker") / "data", env=env) as started:
        yield started


def test_a_flash_function_runs_in_a_container_of_the_flash_image(
    server: Server, tmp_path: Path
) -> None:
    with flash.package_index(tmp_path / "index", bind="0.0.0.0") as index:
        worker_env = index.pip_env(host="host.docker.internal")
        env = flash.flash_env(server.url, server.key, tmp_path) | {
            "WORKER_ENV": json.dumps(worker_env)
        }
        out = flash.run_flash(SCRIPT, env, tmp_path)
        downloads = index.downloads[flash.WHEEL]

    assert out["first"] == ["1.2 million", True]  # in the image: its worker's own files
    assert out["second"] == ["12", True]
    assert out["tally"] == [11, 16]  # one instance's state across method calls
    assert downloads == 1  # installed once in the container, found the second time
    assert "RuntimeError: inside the container" in out["error"]
    (endpoint,) = [
        e for e in server.http.get("/v1/endpoints").json() if e["name"] == "live-in-a-box"
    ]
    (container,) = containers_of(endpoint["id"])
    assert server.extra_env["SKIFF_FLASH_IMAGE"] in container.image.tags


def test_a_load_balanced_flash_endpoint_runs_in_a_container_of_the_flash_image(
    server: Server,
) -> None:
    endpoint_id = flash.lb_flash_endpoint(server, "runpod/flash-lb:py3.12-latest")
    code = "def where():\n    import os\n    return os.path.isdir('/opt/skiff')\n"
    request = flash.function_request("where", code)
    answer = server.wait_for(
        lambda: (
            (r := server.http.post(f"/lb/{endpoint_id}/execute", json=request)).status_code == 200
            and r.json()
        ),
        timeout=120,
        what="the load-balanced Flash container to answer",
    )
    assert answer == {"success": True, "json_result": True, "stdout": None}
    (container,) = containers_of(endpoint_id)
    assert server.extra_env["SKIFF_FLASH_IMAGE"] in container.image.tags
