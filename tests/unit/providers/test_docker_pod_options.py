"""What a pod's container is made with (``providers/docker_pods``), read without a daemon: its
ports published on host ports of Docker's choosing, its GPUs, CPU limits and volume, its process
limit and no-new-privileges, the labels a restarted server finds it by, and the host ports read
back from a started container."""

from __future__ import annotations

from pathlib import Path

import pytest

from skiff.domain.containers import DEFAULT_PIDS_LIMIT
from skiff.providers.base import PodLaunch
from skiff.providers.docker_pods import (
    POD_LABEL,
    POD_MARKER,
    PORTS_LABEL,
    USER_LABEL,
    VERSION_LABEL,
    pod_create_options,
    port_mappings,
)


def launch(**fields: object) -> PodLaunch:
    given: dict[str, object] = {
        "pod_id": "p1",
        "version": 3,
        "image": "repo/image:tag",
        "entrypoint": [],
        "command": ["python", "serve.py"],
        "env": {"A": "1"},
        "ports": ("8888/http", "22/tcp"),
        "volume": Path("/data/volumes/pods/p1"),
        "mount_path": "/workspace",
        "home": Path("/data/pods/p1"),
        **fields,
    }
    return PodLaunch(**given)  # type: ignore[arg-type]


def test_ports_are_published_on_host_ports_of_dockers_choosing() -> None:
    options = pod_create_options(launch(), "server-1")
    assert options["ports"] == {"8888/tcp": None, "22/tcp": None}
    assert options["command"] == ["python", "serve.py"] and "entrypoint" not in options


def test_a_pod_containers_labels_say_it_is_no_worker_whatever_its_image_says() -> None:
    """Docker adds an image's labels to its container's; the pod's own, empty, win over them."""
    from skiff.providers.docker import MARKER, is_ours

    labels = pod_create_options(launch(), "server-1")["labels"]
    assert labels[MARKER] == "" and labels["dev.skiff.worker-id"] == ""
    from_image = {MARKER: "1", "dev.skiff.worker-id": "victim-worker"}
    assert not is_ours(from_image | labels)


def test_the_labels_name_the_pod_its_version_ports_server_and_user() -> None:
    labels = pod_create_options(launch(), "server-1")["labels"]
    assert labels[POD_MARKER] == "1" and labels[POD_LABEL] == "p1"
    assert labels[VERSION_LABEL] == "3" and labels[PORTS_LABEL] == "8888/http,22/tcp"
    assert labels["dev.skiff.server"] == "server-1"
    # Whose it is, for its log's pace when a restarted server follows it again.
    assert labels[USER_LABEL] == ""
    assert pod_create_options(launch(user_id="u1"), "s")["labels"][USER_LABEL] == "u1"
    # Not a worker's marker (set, empty, over any image's): the workers' leftover sweep never
    # sees a pod.
    assert labels["dev.skiff.worker"] == ""


def test_the_volume_is_bound_read_write_at_the_mount_path() -> None:
    options = pod_create_options(launch(), "s")
    assert options["volumes"] == {"/data/volumes/pods/p1": {"bind": "/workspace", "mode": "rw"}}
    assert "volumes" not in pod_create_options(launch(volume=None), "s")


def test_gpus_are_requested_by_index_and_numbered_from_zero_inside() -> None:
    options = pod_create_options(launch(gpu_indices=(2, 5)), "s")
    (request,) = options["device_requests"]
    assert request["DeviceIDs"] == ["2", "5"] and request["Capabilities"] == [["gpu"]]
    assert options["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "device_requests" not in pod_create_options(launch(), "s")


def test_a_cpu_pod_gets_its_vcpus_and_memory() -> None:
    options = pod_create_options(launch(vcpus=4, memory_bytes=8 << 30), "s")
    assert options["nano_cpus"] == 4_000_000_000 and options["mem_limit"] == 8 << 30


def test_a_pod_container_has_a_process_limit_and_gains_no_privileges() -> None:
    options = pod_create_options(launch(), "s")
    assert options["pids_limit"] == DEFAULT_PIDS_LIMIT == 4096
    assert options["security_opt"] == ["no-new-privileges:true"]
    assert pod_create_options(launch(), "s", pids_limit=100)["pids_limit"] == 100


def test_a_pids_limit_of_zero_leaves_the_daemons_default() -> None:
    options = pod_create_options(launch(), "s", pids_limit=0)
    assert "pids_limit" not in options
    assert options["security_opt"] == ["no-new-privileges:true"]


def test_host_ports_are_read_from_a_started_containers_network_settings() -> None:
    attrs = {
        "NetworkSettings": {
            "Ports": {
                "8888/tcp": [{"HostIp": "0.0.0.0", "HostPort": "49153"}],
                "22/tcp": None,
            }
        }
    }
    assert port_mappings(attrs, ["8888/http", "22/tcp"]) == {"8888/http": 49153}
    assert port_mappings({}, ["8888/http"]) == {}


def test_a_relative_volume_is_bound_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Docker reads a relative source as a named volume's name, and refuses one with a "/".
    monkeypatch.chdir(tmp_path)
    options = pod_create_options(launch(volume=Path(".skiff/volumes/pods/p1")), "s")
    source = str(tmp_path.resolve() / ".skiff" / "volumes" / "pods" / "p1")
    assert options["volumes"] == {source: {"bind": "/workspace", "mode": "rw"}}
