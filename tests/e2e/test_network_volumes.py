"""Network volumes end to end on the local provider: a real ``skiff serve`` starts unmodified
runpod-SDK workers through real bubblewrap, and the unmodified runpod SDK is the client. A job
of one endpoint writes a file to ``/runpod-volume``; a job of another endpoint on the same
volume reads it back; the file is in the volume's directory on the server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from harness import Server, free_port

from pod_programs import SERVER
from skiff.providers import bubblewrap
from skiff.providers.base import VOLUME_MOUNT_PATH

pytestmark = pytest.mark.skipif(
    bubblewrap.executable() is None,
    reason="bubblewrap (bwrap) is not installed: .ci/run installs it",
)


def host_has_mount_point() -> bool:
    return Path(VOLUME_MOUNT_PATH).exists()


def test_a_file_written_by_one_endpoint_is_read_by_another_on_the_same_volume(
    server: Server, runpod_client: Any
) -> None:
    host_had_mount_point = host_has_mount_point()
    made = server.http.post("/v1/networkvolumes", json={"name": "shared", "size": 1})
    assert made.status_code == 200, made.text
    volume = made.json()
    writer = server.create_endpoint(
        "volume_worker.py", workersMax=1, idleTimeout=5, networkVolumeId=volume["id"]
    )
    reader = server.create_endpoint(
        "volume_worker.py", workersMax=1, idleTimeout=5, networkVolumeId=volume["id"]
    )

    written = runpod_client.Endpoint(writer["id"]).run_sync(
        {"write": "greeting.txt", "text": "hello from the writer"}, timeout=90
    )
    assert written == {"mounted": True, "written": "greeting.txt"}
    read = runpod_client.Endpoint(reader["id"]).run_sync({"read": "greeting.txt"}, timeout=90)
    assert read == {"mounted": True, "text": "hello from the writer"}

    on_disk = server.data_dir / "volumes" / volume["id"] / "greeting.txt"
    assert on_disk.read_text() == "hello from the writer"
    assert server.http.get(f"/v1/networkvolumes/{volume['id']}").json()["usedBytes"] > 0
    # The workers' mount point lived in their namespaces only.
    assert host_has_mount_point() is host_had_mount_point

    deleted = server.http.delete(f"/v1/networkvolumes/{volume['id']}")
    assert deleted.status_code == 409
    assert writer["id"] in deleted.json()["message"] and reader["id"] in deleted.json()["message"]
    assert on_disk.exists()


def test_a_volume_a_pod_mounts_is_not_deleted_and_the_refusal_names_the_pod(
    server: Server,
) -> None:
    made = server.http.post("/v1/networkvolumes", json={"name": "pod-data", "size": 1})
    assert made.status_code == 200, made.text
    volume = made.json()
    endpoint = server.create_endpoint("volume_worker.py", networkVolumeId=volume["id"])
    pod = server.http.post(
        "/v1/pods",
        json={
            "name": "on-the-volume",
            "imageName": "local/python",
            "computeType": "CPU",
            "dockerStartCmd": [sys.executable, "-c", SERVER, str(free_port())],
            "networkVolumeId": volume["id"],
        },
    ).json()
    starts = server.data_dir / "volumes" / volume["id"] / "starts"
    server.wait_for(starts.exists, what="the pod to write to its volume")

    refused = server.http.delete(f"/v1/networkvolumes/{volume['id']}")
    assert refused.status_code == 409, refused.text
    message = refused.json()["message"]
    assert f"endpoint(s) {endpoint['id']}" in message and f"pod(s) {pod['id']}" in message
    assert starts.exists()

    # Once the endpoint is gone, the pod alone still holds it, stopped or not.
    assert server.http.delete(f"/v1/endpoints/{endpoint['id']}").status_code == 204
    assert server.http.post(f"/v1/pods/{pod['id']}/stop").status_code == 200
    refused = server.http.delete(f"/v1/networkvolumes/{volume['id']}")
    assert refused.status_code == 409 and "endpoint" not in refused.json()["message"]

    # A deleted pod no longer holds it, even before the runner has removed it.
    assert server.http.delete(f"/v1/pods/{pod['id']}").status_code == 204
    assert server.http.delete(f"/v1/networkvolumes/{volume['id']}").status_code == 204
    assert not starts.exists()
