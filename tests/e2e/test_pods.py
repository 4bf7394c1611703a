"""Pods end to end on the local provider, in a real ``skiff serve``: a pod and serverless
endpoints compete for a declared GPU fleet (``SKIFF_GPUS``) and never share a GPU, ``skiff gpus``
names who holds each, and a server killed with SIGKILL and restarted starts its pods again with
their volume (mounted through real bubblewrap) as they left it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, running

from pod_programs import SERVER, pod_port
from skiff.providers import bubblewrap

RTX = "NVIDIA GeForce RTX 4090"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(
        tmp_path_factory.mktemp("pod-fleet") / "data", env={"SKIFF_GPUS": f"{RTX}:2"}
    ) as server:
        yield server


def served(url: str, server: Server) -> dict[str, Any]:
    def answer() -> dict[str, Any] | None:
        try:
            return dict(httpx.get(url, timeout=2).json())
        except httpx.TransportError:
            return None

    return dict(server.wait_for(answer, what=f"{url} to answer"))


def running_pod(server: Server, pod_id: str) -> dict[str, Any]:
    def placed() -> dict[str, Any] | None:
        pod = dict(server.http.get(f"/v1/pods/{pod_id}").json())
        return pod if pod["status"] == "running" else None

    return dict(server.wait_for(placed, what=f"pod {pod_id} to run"))


def skiff_gpus(server: Server) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "skiff", "gpus", "--data-dir", str(server.data_dir)],
        env=server.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def workers_gpus(server: Server) -> list[int]:
    held: list[int] = []
    for endpoint in server.http.get("/v1/endpoints", params={"includeWorkers": "true"}).json():
        for worker in endpoint.get("workers", []):
            if worker.get("gpuIds") and worker["state"] != "throttled":
                held.extend(int(i) for i in worker["gpuIds"].split(","))
    return held


def test_a_pod_and_an_endpoint_never_share_a_gpu_and_skiff_gpus_names_both(
    fleet: Server,
) -> None:
    port = pod_port()
    made = fleet.http.post(
        "/v1/pods",
        json={
            "name": "notebook",
            "imageName": "local/python",
            "gpuTypeIds": [RTX],
            "gpuCount": 1,
            "dockerStartCmd": [sys.executable, "-c", SERVER, str(port)],
            "ports": [f"{port}/http"],
            "volumeInGb": 0,
        },
    )
    assert made.status_code == 201, made.text
    pod = running_pod(fleet, made.json()["id"])
    assert pod["gpu"] == {"id": RTX, "count": 1, "displayName": RTX}
    inside = served(pod["urls"][f"{port}/http"], fleet)
    assert inside["gpus"] == "1" and inside["cuda"] in ("0", "1")
    pod_index = int(inside["cuda"])

    # The endpoint's worker takes the other GPU, never the pod's.
    endpoint = fleet.create_endpoint(
        "gpu_worker.py", computeType="GPU", gpuTypeIds=[RTX], workersMax=1, idleTimeout=60
    )
    out = fleet.http.post(f"/v2/{endpoint['id']}/runsync", json={"input": {}}, timeout=120)
    assert out.json()["status"] == "COMPLETED", out.text
    assert out.json()["output"]["cuda"] == str(1 - pod_index)
    assert workers_gpus(fleet) == [1 - pod_index]

    # Both are taken: a second pod is refused, naming what is missing.
    refused = fleet.http.post(
        "/v1/pods",
        json={"imageName": "local/python", "gpuTypeIds": [RTX], "dockerStartCmd": ["true"]},
    )
    assert refused.status_code == 409 and "free" in refused.json()["message"], refused.text
    table = skiff_gpus(fleet)
    assert f"pod {pod['id']} (notebook)" in table and f"{endpoint['id']}/" in table

    # Stopped, the pod frees its GPU; started again, it is placed where a GPU is free.
    stopped = fleet.http.post(f"/v1/pods/{pod['id']}/stop")
    assert stopped.json()["desiredStatus"] == "EXITED"
    fleet.wait_for(
        lambda: fleet.http.get(f"/v1/pods/{pod['id']}").json()["status"] == "stopped",
        what="the pod to stop",
    )
    assert f"pod {pod['id']}" not in skiff_gpus(fleet)
    assert fleet.http.post(f"/v1/pods/{pod['id']}/start").status_code == 200
    again = running_pod(fleet, pod["id"])
    assert int(served(again["urls"][f"{port}/http"], fleet)["cuda"]) not in workers_gpus(fleet)
    fleet.http.delete(f"/v1/pods/{pod['id']}")
    fleet.http.delete(f"/v1/endpoints/{endpoint['id']}")


@pytest.mark.skipif(
    bubblewrap.executable() is None, reason="bubblewrap (bwrap) mounts a process pod's volume"
)
def test_a_server_killed_with_sigkill_starts_its_pods_again_with_their_volume(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path / "data")
    server.start()
    try:
        port = pod_port()
        made = server.http.post(
            "/v1/pods",
            json={
                "name": "survivor",
                "imageName": "local/python",
                "computeType": "CPU",
                "dockerStartCmd": [sys.executable, "-c", SERVER, str(port)],
                "ports": [f"{port}/http"],
                "volumeInGb": 1,
            },
        )
        assert made.status_code == 201, made.text
        pod = running_pod(server, made.json()["id"])
        url = pod["urls"][f"{port}/http"]
        before = served(url, server)
        assert before["starts"] == 1

        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        # The pod's process died with the server (as a local worker does).
        server.wait_for(lambda: _silent(url), what="the pod's process to end")

        server.start()
        again = running_pod(server, pod["id"])
        after = served(again["urls"][f"{port}/http"], server)
        assert after["starts"] == 2 and after["instance"] != before["instance"]
        assert (server.data_dir / "volumes" / "pods" / pod["id"] / "starts").read_text() == "2"
        # Its log holds both starts' output, as `skiff logs --pod` prints it.
        command = ["logs", pod["id"], "--pod", "--url", server.url, "--key", server.key]
        printed = subprocess.run(
            [sys.executable, "-m", "skiff", *command],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert printed.count(f"serving on {port}") == 2, printed
    finally:
        server.stop()


def _silent(url: str) -> bool:
    """Nothing answers at the pod's URL any more (its pid is its sandbox's, not the host's)."""
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return True
    return False


@pytest.mark.skipif(
    bubblewrap.executable() is None, reason="bubblewrap (bwrap) mounts a process pod's volume"
)
def test_a_pod_on_the_default_relative_data_dir_runs_with_its_volume(tmp_path: Path) -> None:
    # No --data-dir, no SKIFF_DATA_DIR: .skiff in the directory the server starts in. Its
    # volume's path reaches bwrap absolute (bwrap runs elsewhere than the server).
    unset: dict[str, str | None] = {"SKIFF_DATA_DIR": None, "SKIFF_VOLUMES_DIR": None}
    with running(Path(".skiff"), cwd=tmp_path, data_dir_given=False, env=unset) as server:
        port = pod_port()
        made = server.http.post(
            "/v1/pods",
            json={
                "imageName": "local/python",
                "computeType": "CPU",
                "dockerStartCmd": [sys.executable, "-c", SERVER, str(port)],
                "ports": [f"{port}/http"],
                "volumeInGb": 1,
            },
        )
        assert made.status_code == 201, made.text
        pod = running_pod(server, made.json()["id"])
        assert served(pod["urls"][f"{port}/http"], server)["starts"] == 1
        volume = tmp_path / ".skiff" / "volumes" / "pods" / pod["id"]
        assert (volume / "starts").read_text() == "1"
        server.http.delete(f"/v1/pods/{pod['id']}")
