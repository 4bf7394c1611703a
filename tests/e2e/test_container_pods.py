"""Pods as containers (``SKIFF_PROVIDER=docker``) of the container tests' image, in a real
``skiff serve`` against the real Docker Engine: a pod made from a template serves HTTP on the
host port Docker published, keeps its volume across stop, start, restart and reset while its
container disk goes with a stop or a reset, survives its server's SIGKILL (the restarted server
adopts the running container instead of starting another), mounts a network volume in place of
its own, and leaves nothing behind once deleted."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server

from docker_image import CONTAINER_SERVER_ENV, PYTHON_IN_IMAGE, docker_client
from pod_programs import SERVER

PORT = "8888/http"


@contextlib.contextmanager
def serving(
    tmp_path: Path, data_dir: Path, env: dict[str, str | None] | None = None, **options: Any
) -> Iterator[Server]:
    server = Server(data_dir, env={**CONTAINER_SERVER_ENV, **(env or {})}, **options)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        # A pod's container outlives its server by design: this test's go with it.
        for container in pod_containers():
            if str(tmp_path) in str(container.attrs.get("Mounts")):
                container.remove(force=True)


@pytest.fixture
def server(tmp_path: Path, image: str) -> Iterator[Server]:
    with serving(tmp_path, tmp_path / "data") as server:
        yield server


def pod_containers(pod_id: str | None = None) -> list[Any]:
    label = f"dev.skiff.pod-id={pod_id}" if pod_id else "dev.skiff.pod=1"
    return list(
        docker_client().containers.list(all=True, ignore_removed=True, filters={"label": label})
    )


def running_pod(server: Server, pod_id: str) -> dict[str, Any]:
    def placed() -> dict[str, Any] | None:
        pod = dict(server.http.get(f"/v1/pods/{pod_id}").json())
        return pod if pod["status"] == "running" else None

    return dict(server.wait_for(placed, timeout=90, what=f"pod {pod_id} to run"))


def state(server: Server, pod: dict[str, Any], wanted: dict[str, Any] | None = None) -> Any:
    """What the pod serves on its published port, once it answers (as ``wanted``, if given)."""
    url = pod["urls"][PORT]

    def answer() -> dict[str, Any] | None:
        try:
            got = dict(httpx.get(url, timeout=2).json())
        except (httpx.TransportError, ValueError):
            return None
        return got if wanted is None or wanted.items() <= got.items() else None

    return server.wait_for(answer, timeout=60, what=f"{url} to answer {wanted}")


def write_disk(pod: dict[str, Any], text: str) -> None:
    assert httpx.post(pod["urls"][PORT], content=text).json() == {"written": True}


def make_pod(server: Server, image: str, **fields: Any) -> dict[str, Any]:
    template = server.http.post(
        "/v1/templates",
        json={
            "name": f"web-{os.urandom(3).hex()}",
            "imageName": image,
            "dockerStartCmd": [PYTHON_IN_IMAGE, "-c", SERVER, "8888"],
            "ports": [PORT],
            "volumeInGb": 1,
            "env": {"GREETING": "from the template"},
        },
    )
    assert template.status_code == 200, template.text
    made = server.http.post(
        "/v1/pods",
        json={"templateId": template.json()["id"], "computeType": "CPU", "name": "web", **fields},
    )
    assert made.status_code == 201, made.text
    return running_pod(server, made.json()["id"])


def test_a_pod_serves_its_port_keeps_its_volume_and_loses_its_disk_as_documented(
    server: Server, image: str
) -> None:
    pod = make_pod(server, image)
    host_port = pod["portMappings"][PORT]
    assert pod["urls"][PORT] == f"http://127.0.0.1:{host_port}" and pod["publicIp"] == "127.0.0.1"
    (container,) = pod_containers(pod["id"])
    assert container.attrs["Mounts"][0]["Destination"] == "/workspace"
    first = state(server, pod)
    assert (first["starts"], first["disk"], first["greeting"]) == (1, None, "from the template")
    write_disk(pod, "on the container disk")

    # Restarted in place: the same container, its disk kept.
    assert server.http.post(f"/v1/pods/{pod['id']}/restart").status_code == 200
    pod = running_pod(server, pod["id"])
    assert state(server, pod, {"starts": 2})["disk"] == "on the container disk"
    assert [c.id for c in pod_containers(pod["id"])] == [container.id]

    # Reset: a fresh container of the image; the volume kept.
    assert server.http.post(f"/v1/pods/{pod['id']}/reset").status_code == 200
    server.wait_for(
        lambda: [c.id for c in pod_containers(pod["id"])] not in ([], [container.id]),
        what="a fresh container",
    )
    pod = running_pod(server, pod["id"])
    assert state(server, pod, {"starts": 3})["disk"] is None
    write_disk(pod, "again")

    # Stopped: no container; started: a fresh one, the volume still counting.
    assert server.http.post(f"/v1/pods/{pod['id']}/stop").status_code == 200
    server.wait_for(lambda: pod_containers(pod["id"]) == [], what="the container to go")
    stopped = server.http.get(f"/v1/pods/{pod['id']}").json()
    assert stopped["status"] == "stopped" and stopped["portMappings"] == {}
    assert server.http.post(f"/v1/pods/{pod['id']}/start").status_code == 200
    pod = running_pod(server, pod["id"])
    assert state(server, pod, {"starts": 4})["disk"] is None

    logged = server.http.get(f"/v1/pods/{pod['id']}/logs").json()["lines"]
    assert sum("serving on 8888" in line["line"] for line in logged) >= 3, logged

    # Deleted: the container and the volume go.
    volume = server.data_dir / "volumes" / "pods" / pod["id"]
    assert (volume / "starts").read_text() == "4"
    assert server.http.delete(f"/v1/pods/{pod['id']}").status_code == 204
    server.wait_for(
        lambda: pod_containers(pod["id"]) == [] and not volume.exists(), what="the pod to go"
    )


def test_a_killed_server_adopts_its_running_pod_container(server: Server, image: str) -> None:
    pod = make_pod(server, image)
    before = state(server, pod)
    (container,) = pod_containers(pod["id"])

    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    # A pod outlives its server: it still answers.
    assert httpx.get(pod["urls"][PORT], timeout=5).json()["pid"] == before["pid"]

    server.start()
    adopted = running_pod(server, pod["id"])
    assert adopted["portMappings"] == pod["portMappings"]
    assert [c.id for c in pod_containers(pod["id"])] == [container.id]
    after = state(server, adopted)
    assert (after["starts"], after["pid"]) == (1, before["pid"])

    # The adopted container is this server's to stop.
    assert server.http.post(f"/v1/pods/{pod['id']}/stop").status_code == 200
    server.wait_for(lambda: pod_containers(pod["id"]) == [], what="the adopted container to go")
    server.http.delete(f"/v1/pods/{pod['id']}")


def test_a_network_volume_is_mounted_in_place_of_the_pods_own(server: Server, image: str) -> None:
    made = server.http.post("/v1/networkvolumes", json={"name": "data", "size": 1})
    assert made.status_code == 200, made.text
    volume = made.json()
    pod = make_pod(server, image, networkVolumeId=volume["id"], volumeMountPath="/data")
    assert state(server, pod)["starts"] == 1
    assert (server.data_dir / "volumes" / volume["id"] / "starts").read_text() == "1"
    assert not (server.data_dir / "volumes" / "pods" / pod["id"]).exists()
    (container,) = pod_containers(pod["id"])
    assert container.attrs["Mounts"][0]["Destination"] == "/data"
    assert server.http.delete(f"/v1/pods/{pod['id']}").status_code == 204
    server.wait_for(lambda: pod_containers(pod["id"]) == [], what="the pod to go")
    # The network volume is the user's: it outlives the pod.
    assert (server.data_dir / "volumes" / volume["id"] / "starts").exists()


def test_a_pod_on_the_default_relative_data_dir_runs_with_its_volume(
    tmp_path: Path, image: str
) -> None:
    # No --data-dir, no SKIFF_DATA_DIR: .skiff in the directory the server starts in. Its
    # volume's path reaches Docker absolute (a relative one is taken for a volume's name).
    unset: dict[str, str | None] = {"SKIFF_DATA_DIR": None, "SKIFF_VOLUMES_DIR": None}
    with serving(tmp_path, Path(".skiff"), unset, cwd=tmp_path, data_dir_given=False) as server:
        pod = make_pod(server, image)
        assert state(server, pod)["starts"] == 1
        volume = tmp_path / ".skiff" / "volumes" / "pods" / pod["id"]
        assert (volume / "starts").read_text() == "1"
        (container,) = pod_containers(pod["id"])
        assert container.attrs["Mounts"][0]["Source"] == str(volume)


def test_a_pod_container_whose_volume_holds_more_than_its_size_is_ended_and_its_files_kept(
    tmp_path: Path, image: str
) -> None:
    with serving(tmp_path, tmp_path / "data", {"SKIFF_DISK_CHECK_SECONDS": "1"}) as server:
        pod = make_pod(server, image)
        volume = server.data_dir / "volumes" / "pods" / pod["id"]
        # Real blocks, as the container's write would take them, in no time.
        with open(volume / "over.bin", "wb") as over:
            os.posix_fallocate(over.fileno(), 0, 1024**3 + 1024**3 // 8)

        def problem() -> str | None:
            said = server.http.get(f"/v1/pods/{pod['id']}").json()["problem"]
            return said if said and "volume" in said else None

        said = server.wait_for(problem, timeout=60, what="the pod's eviction")
        assert "its volume held 1.13 GB, over volumeInGb (1 GB)" in said
        assert (volume / "over.bin").exists()
        assert server.http.delete(f"/v1/pods/{pod['id']}").status_code == 204


def test_a_pod_container_that_writes_past_its_container_disk_starts_again_on_a_fresh_one(
    tmp_path: Path, image: str
) -> None:
    with serving(tmp_path, tmp_path / "data", {"SKIFF_DISK_CHECK_SECONDS": "1"}) as server:
        pod = make_pod(server, image, containerDiskInGb=1)
        (container,) = pod_containers(pod["id"])
        # 1.2 GB of real blocks on the container's own disk, in no time.
        fill = (
            "import os; f = os.open('/filler', os.O_CREAT | os.O_WRONLY); "
            f"os.posix_fallocate(f, 0, {1024**3 * 6 // 5})"
        )
        code, said = container.exec_run([PYTHON_IN_IMAGE, "-c", fill])
        assert code == 0, said

        def problem() -> str | None:
            said = server.http.get(f"/v1/pods/{pod['id']}").json()["problem"]
            return said if said and "container disk" in said else None

        said = server.wait_for(problem, timeout=60, what="the pod's eviction")
        assert "its container disk held 1.20 GB, over containerDiskInGb (1 GB)" in said
        # Started again after the back-off, on a fresh container: nothing of the filler left.
        fresh = server.wait_for(
            lambda: next((c for c in pod_containers(pod["id"]) if c.id != container.id), None),
            timeout=60,
            what="a fresh container",
        )
        assert running_pod(server, pod["id"])["status"] == "running"
        assert fresh.exec_run(["test", "-e", "/filler"])[0] != 0
        assert server.http.delete(f"/v1/pods/{pod['id']}").status_code == 204
