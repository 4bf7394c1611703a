"""The container provider's pure parts: CPU limits from flavors, labels and which containers
are skiff's, the process limit and no-new-privileges, the server URL as a container sees it, and
credentials kept out of reprs."""

from __future__ import annotations

from pathlib import Path

from skiff.domain.containers import (
    DEFAULT_PIDS_LIMIT,
    GIB,
    cpu_limits,
    parse_instance_id,
    shown_instance_ids,
    visible_devices_inside,
)
from skiff.domain.endpoints import ComputeType, CpuFlavor, EndpointSpec
from skiff.providers.base import ContainerSpec, Launch, RegistryCredentials
from skiff.providers.docker import (
    _Handover,
    create_options,
    gateway_url,
    is_ours,
    labels,
    pull_failure,
    server_identity,
    split_reference,
)


def spec(**fields: object) -> EndpointSpec:
    return EndpointSpec.model_validate({"name": "e", "templateId": "t", **fields})


def test_an_instance_id_names_vcpus_and_gigabytes() -> None:
    limits = parse_instance_id("cpu3c-2-4")
    assert limits is not None and limits.vcpus == 2 and limits.memory_bytes == 4 * GIB
    assert limits.nano_cpus == 2_000_000_000
    assert parse_instance_id("cpu9x-2-4") is None and parse_instance_id("cpu3c-0-4") is None


def test_a_cpu_endpoint_gets_vcpu_count_with_its_flavors_memory() -> None:
    compute = cpu_limits(spec(computeType=ComputeType.CPU, vcpuCount=2))
    assert compute is not None and compute.memory_bytes == 4 * GIB  # cpu3c: 2 GB per vCPU
    general = cpu_limits(
        spec(computeType=ComputeType.CPU, vcpuCount=4, cpuFlavorIds=[CpuFlavor.cpu5g])
    )
    assert general is not None and (general.vcpus, general.memory_bytes) == (4, 16 * GIB)


def test_the_first_instance_id_decides_the_limits_memory_included() -> None:
    # cpu3c-2-8 is not a flavor's usual ratio: the id's own memory counts, not 2 GB per vCPU.
    limits = cpu_limits(spec(computeType=ComputeType.CPU, instanceIds=["cpu3c-2-8", "cpu5g-4-16"]))
    assert limits is not None and (limits.vcpus, limits.memory_bytes) == (2, 8 * GIB)


def test_a_cpu_endpoint_shows_the_instance_id_its_settings_amount_to() -> None:
    assert shown_instance_ids(spec(computeType=ComputeType.CPU)) == ["cpu3c-2-4"]
    given = spec(computeType=ComputeType.CPU, instanceIds=["cpu5c-8-16"])
    assert shown_instance_ids(given) == ["cpu5c-8-16"]
    assert (given.vcpuCount, given.cpuFlavorIds) == (8, [CpuFlavor.cpu5c])
    assert shown_instance_ids(spec(computeType=ComputeType.GPU)) == []


def test_a_gpu_endpoint_gets_no_cpu_quota() -> None:
    assert cpu_limits(spec(computeType=ComputeType.GPU)) is None


def test_gpus_inside_a_container_are_numbered_from_zero() -> None:
    assert visible_devices_inside(2) == "0,1"


def test_only_containers_with_the_marker_and_a_worker_id_are_ours() -> None:
    assert is_ours(labels("w1", "e1", "r1", "s1"))
    assert not is_ours({"dev.skiff.worker-id": "w1"})  # no marker: somebody else's
    assert not is_ours({"dev.skiff.worker": "1"})
    assert not is_ours(None)


def test_a_loopback_server_url_becomes_the_host_gateway() -> None:
    assert gateway_url("http://127.0.0.1:8000") == "http://host.docker.internal:8000"
    assert gateway_url("http://localhost:80/x") == "http://host.docker.internal:80/x"
    assert gateway_url("https://skiff.example.com") == "https://skiff.example.com"


def test_an_image_reference_splits_into_repository_and_tag() -> None:
    assert split_reference("127.0.0.1:5000/a/b:v1") == ("127.0.0.1:5000/a/b", "v1")
    assert split_reference("127.0.0.1:5000/a/b") == ("127.0.0.1:5000/a/b", "latest")
    assert split_reference("a@sha256:00") == ("a", "sha256:00")


def test_a_failed_pull_says_which_failure_it_was() -> None:
    assert "refused the credentials" in pull_failure("i", "unauthorized: authentication required")
    assert "does not exist" in pull_failure("i", "manifest unknown")
    assert "could not be reached" in pull_failure("i", "dial tcp 127.0.0.1:1: connection refused")


def test_credentials_never_show_their_password() -> None:
    credentials = RegistryCredentials("alice", "s3cret-pw")
    container = ContainerSpec(image="x", credentials=credentials)
    assert "s3cret-pw" not in repr(credentials) and "s3cret-pw" not in repr(container)
    assert "alice" in repr(credentials)


def launch(tmp_path: Path, container: ContainerSpec) -> Launch:
    home = tmp_path / "home"
    return Launch(
        worker_id="w1",
        endpoint_id="e1",
        argv=[],
        env={"HOME": str(home.resolve()), "CUDA_VISIBLE_DEVICES": "2,3", "A": "1"},
        home=home,
        container=container,
    )


def test_a_gpu_worker_asks_for_exactly_its_gpus(tmp_path: Path) -> None:
    container = ContainerSpec(image="x", gpu_indices=(2, 3))
    options = create_options(launch(tmp_path, container), container, "r1", "s1")
    (request,) = options["device_requests"]
    assert request["Driver"] == "nvidia" and request["DeviceIDs"] == ["2", "3"]
    assert options["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert options["environment"]["NVIDIA_VISIBLE_DEVICES"] == "2,3"
    # The host path of the worker's home means nothing in the container.
    assert "HOME" not in options["environment"] and options["environment"]["A"] == "1"
    assert options["extra_hosts"] == {"host.docker.internal": "host-gateway"}
    assert options["labels"]["dev.skiff.owner"] == "r1"
    assert options["labels"]["dev.skiff.server"] == "s1"


def test_a_cpu_worker_gets_limits_and_the_images_own_command(tmp_path: Path) -> None:
    container = ContainerSpec(image="x", vcpus=2, memory_bytes=4 * GIB)
    options = create_options(launch(tmp_path, container), container, "r1", "s1")
    assert options["nano_cpus"] == 2_000_000_000 and options["mem_limit"] == 4 * GIB
    assert "entrypoint" not in options and "command" not in options
    assert "device_requests" not in options


def test_a_worker_container_has_a_process_limit_and_gains_no_privileges(tmp_path: Path) -> None:
    container = ContainerSpec(image="x")
    options = create_options(launch(tmp_path, container), container, "r1", "s1")
    assert options["pids_limit"] == DEFAULT_PIDS_LIMIT == 4096
    assert options["security_opt"] == ["no-new-privileges:true"]
    limited = create_options(launch(tmp_path, container), container, "r1", "s1", pids_limit=512)
    assert limited["pids_limit"] == 512
    # 0: skiff sets none, and the daemon's own default applies.
    unset = create_options(launch(tmp_path, container), container, "r1", "s1", pids_limit=0)
    assert "pids_limit" not in unset and unset["security_opt"] == ["no-new-privileges:true"]


def test_a_servers_identity_survives_its_restart_and_names_its_host_and_data_dir(
    tmp_path: Path,
) -> None:
    # The replica id is new at every start; this is what a restarted server finds its
    # containers by.
    here = server_identity("host-a", tmp_path / "data")
    assert server_identity("host-a", tmp_path / "data") == here
    assert server_identity("host-a", tmp_path / "other") != here
    assert server_identity("host-b", tmp_path / "data") != here
    assert str(tmp_path) not in here


class Container:
    """Stands in for a docker container: records its removal."""

    name = "skiff-w1"

    def __init__(self) -> None:
        self.removed = False

    def remove(self, force: bool) -> None:
        self.removed = force


def test_a_container_started_for_a_caller_that_gave_up_is_removed_whichever_comes_first() -> None:
    kept, late, early = Container(), Container(), Container()
    handover = _Handover()
    handover.give(kept)
    assert not kept.removed  # handed over: the caller runs it
    given_up = _Handover()
    given_up.give(late)
    remover = given_up.abandon()  # the caller gave up after the container was started
    assert remover is not None
    remover.join()
    early_handover = _Handover()
    assert early_handover.abandon() is None  # ... or before: the starting thread removes it
    early_handover.give(early)
    assert late.removed and early.removed
