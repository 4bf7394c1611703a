"""The container provider against the real Docker daemon: a worker's container starts with its
labels, streams its output into the log sink, reports its exit code whoever ended it, stops with
a grace, has leftovers of an earlier server removed by label, and never touches a container
that is not skiff's."""

from __future__ import annotations

import asyncio
import contextlib
import io
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container

from docker_image import docker_client, ensure_test_image
from skiff.providers import docker as docker_provider
from skiff.providers.base import ContainerSpec, Launch, WorkerStartError
from skiff.providers.docker import MARKER, NETWORK, NETWORK_OPTIONS, POD_MARKER, DockerProvider


class Sink:
    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def feed(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        self.closed = True


class Harness:
    def __init__(
        self, client: Any, owner: str = "replica-test", server: str = "server-test"
    ) -> None:
        self.exits: list[tuple[str, int]] = []
        self.sinks: dict[str, Sink] = {}
        self.exited = asyncio.Event()

        async def on_exit(worker_id: str, code: int) -> None:
            self.exits.append((worker_id, code))
            self.exited.set()

        def sink(_endpoint: str, worker: str, _user: str | None = None) -> Sink:
            return self.sinks.setdefault(worker, Sink())

        self.provider = DockerProvider(
            on_exit, logs=sink, owner=owner, server=server, client=client
        )


@pytest.fixture(scope="module")
def image() -> str:
    docker_client()
    return ensure_test_image()


@pytest.fixture
def client() -> Any:
    client = docker_client()
    yield client
    for container in client.containers.list(
        all=True, ignore_removed=True, filters={"label": "dev.skiff.test=1"}
    ):
        container.remove(force=True)
    client.close()


def launch(tmp_path: Path, worker_id: str, image: str, command: list[str], **spec: Any) -> Launch:
    return Launch(
        worker_id=worker_id,
        endpoint_id="ep-test",
        argv=[],
        env={"GREETING": "hello"},
        home=tmp_path / worker_id,
        container=ContainerSpec(image=image, command=command, **spec),
    )


async def test_a_container_logs_its_output_and_reports_its_exit_code(
    tmp_path: Path, image: str, client: Any
) -> None:
    harness = Harness(client)
    script = 'echo "$GREETING from $(cat /etc/skiff-test-image)"; echo "path=$PATH"; exit 7'
    # It may have ended before its start returned (then no pid is known): not checked here.
    await harness.provider.start(launch(tmp_path, "w-exit", image, ["/bin/sh", "-c", script]))
    await asyncio.wait_for(harness.exited.wait(), 60)
    assert harness.exits == [("w-exit", 7)]
    sink = harness.sinks["w-exit"]
    assert b"hello from inside the skiff test image" in sink.data and sink.closed
    # The server's own environment is not inherited: PATH is the image's.
    assert b"path=/opt/venv/bin:" in sink.data
    assert harness.provider.running() == []
    # Removed once its exit was reported.
    assert (
        client.containers.list(
            all=True, ignore_removed=True, filters={"label": "dev.skiff.worker-id=w-exit"}
        )
        == []
    )


async def test_a_stopped_container_is_killed_after_its_grace_and_reported(
    tmp_path: Path, image: str, client: Any
) -> None:
    harness = Harness(client)
    # Ignores SIGTERM: only the SIGKILL after the grace ends it.
    script = "trap '' TERM; echo started; while true; do sleep 0.1; done"
    pid = await harness.provider.start(launch(tmp_path, "w-stop", image, ["/bin/sh", "-c", script]))
    assert pid > 0  # the container's main process, as the host numbers it
    (container,) = client.containers.list(
        ignore_removed=True, filters={"label": "dev.skiff.worker-id=w-stop"}
    )
    assert container.labels["dev.skiff.endpoint-id"] == "ep-test"
    assert container.labels["dev.skiff.owner"] == "replica-test"
    assert container.labels["dev.skiff.worker"] == "1"
    assert harness.provider.running() == ["w-stop"]
    await harness.provider.stop("w-stop", grace=1)
    await asyncio.wait_for(harness.exited.wait(), 60)
    assert harness.exits == [("w-stop", 137)]


async def test_an_image_labelled_as_a_pod_makes_no_worker_container_pass_for_one(
    tmp_path: Path, image: str, client: Any
) -> None:
    """Docker adds an image's own labels to its containers, and a tenant writes its image: one
    labelled as another tenant's pod must not make the worker's container a pod that the
    pod provider would adopt (and send that pod's owner's terminal and ports into)."""
    from skiff.providers.docker_pods import POD_LABEL, PORTS_LABEL

    tag = f"skiff-test-pod-labelled:{uuid.uuid4().hex[:8]}"
    dockerfile = (
        f"FROM {image}\n"
        f'LABEL {POD_MARKER}="1" {POD_LABEL}="victim-pod" {PORTS_LABEL}="8888/http" '
        'dev.skiff.test="1"\n'
    )
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    try:
        harness = Harness(client)
        await harness.provider.start(launch(tmp_path, "w-labelled", tag, ["sleep", "600"]))
        (container,) = client.containers.list(
            ignore_removed=True, filters={"label": "dev.skiff.worker-id=w-labelled"}
        )
        assert container.labels[POD_MARKER] == ""  # the worker's own label over the image's
        assert container.labels[MARKER] == "1"
        pods = client.containers.list(filters={"label": [f"{POD_MARKER}=1"]})
        assert container.id not in {c.id for c in pods}
        await harness.provider.stop("w-labelled", grace=0)
        await asyncio.wait_for(harness.exited.wait(), 60)
    finally:
        client.images.remove(tag, force=True)


async def test_leftovers_are_removed_by_label_and_foreign_containers_are_left_alone(
    tmp_path: Path, image: str, client: Any
) -> None:
    earlier = Harness(client, owner="replica-gone")
    await earlier.provider.start(launch(tmp_path, "w-left", image, ["sleep", "600"]))
    foreign = client.containers.run(
        image,
        ["sleep", "600"],
        detach=True,
        labels={"dev.skiff.test": "1", "dev.skiff.worker-id": "w-left"},  # no skiff marker
    )
    later = Harness(client)  # a restarted server: it did not start w-left
    assert later.provider.kill_leftover("w-left", 12345)
    assert (
        client.containers.list(
            all=True, ignore_removed=True, filters={"label": "dev.skiff.worker=1"}
        )
        == []
    )
    foreign.reload()
    assert foreign.status == "running"
    assert not later.provider.kill_leftover("w-nobody", 1)
    await asyncio.wait_for(earlier.exited.wait(), 60)


async def test_a_restarted_server_ends_every_container_of_its_earlier_run_and_no_other(
    tmp_path: Path, image: str, client: Any
) -> None:
    # The earlier run of this server (same server identity, another replica id), another server
    # on the same daemon (its own identity), and a container skiff never made.
    earlier = Harness(client, owner="replica-gone")
    other_server = Harness(client, owner="replica-other", server="server-other")
    await earlier.provider.start(launch(tmp_path, "w-earlier", image, ["sleep", "600"]))
    await other_server.provider.start(launch(tmp_path, "w-other", image, ["sleep", "600"]))
    unlabelled = client.containers.run(
        image, ["sleep", "600"], detach=True, labels={"dev.skiff.test": "1"}
    )
    try:
        restarted = Harness(client)
        assert restarted.provider.end_leftovers() == ["w-earlier"]
        left = client.containers.list(
            all=True, ignore_removed=True, filters={"label": "dev.skiff.worker=1"}
        )
        assert [c.labels["dev.skiff.worker-id"] for c in left] == ["w-other"]
        unlabelled.reload()
        assert unlabelled.status == "running"
        assert restarted.provider.end_leftovers() == []
        await asyncio.wait_for(earlier.exited.wait(), 60)
    finally:
        await other_server.provider.stop("w-other", grace=0)
        await asyncio.wait_for(other_server.exited.wait(), 60)


async def test_a_missing_image_is_a_start_error_that_says_so(
    tmp_path: Path, image: str, client: Any
) -> None:
    harness = Harness(client)
    with pytest.raises(WorkerStartError, match="could not be pulled"):
        await harness.provider.start(
            launch(tmp_path, "w-missing", "127.0.0.1:1/skiff/none:v1", ["true"])
        )
    assert b"could not be pulled" in harness.sinks["w-missing"].data
    assert harness.sinks["w-missing"].closed and harness.exits == []


def test_a_gpu_worker_asks_docker_for_exactly_its_gpus(
    tmp_path: Path, image: str, client: Any
) -> None:
    """No GPU on this machine: the device request is checked as Docker records it, without
    starting the container (which needs the NVIDIA container toolkit)."""
    harness = Harness(client)
    container = harness.provider.create_container(
        launch(tmp_path, "w-gpu", image, ["true"], gpu_indices=(1, 3))
    )
    try:
        container.reload()
        (request,) = container.attrs["HostConfig"]["DeviceRequests"]
        assert request["Driver"] == "nvidia"
        assert request["DeviceIDs"] == ["1", "3"]
        assert request["Capabilities"] == [["gpu"]]
        env = container.attrs["Config"]["Env"]
        assert "CUDA_VISIBLE_DEVICES=0,1" in env and "NVIDIA_VISIBLE_DEVICES=1,3" in env
    finally:
        container.remove(force=True)


def test_a_cpu_worker_gets_its_cpu_and_memory_limits(
    tmp_path: Path, image: str, client: Any
) -> None:
    harness = Harness(client)
    container = harness.provider.create_container(
        launch(tmp_path, "w-cpu", image, ["true"], vcpus=2, memory_bytes=4 * 1024**3)
    )
    try:
        container.reload()
        host = container.attrs["HostConfig"]
        assert host["NanoCpus"] == 2_000_000_000 and host["Memory"] == 4 * 1024**3
    finally:
        container.remove(force=True)


async def test_container_disk_is_a_size_limit_where_the_driver_has_one_and_said_where_not(
    tmp_path: Path, image: str, client: Any
) -> None:
    """``containerDiskInGb``: overlay2 on ext4 (this machine, and most) cannot limit a
    container's disk; the worker starts anyway and its log says the limit is not applied.
    Where the driver can (overlay2 on XFS with pquota, btrfs, zfs), Docker records the size."""
    harness = Harness(client)
    script = "echo started; while true; do sleep 0.1; done"
    await harness.provider.start(
        launch(tmp_path, "w-disk", image, ["/bin/sh", "-c", script], disk_gb=5)
    )
    (container,) = client.containers.list(
        ignore_removed=True, filters={"label": "dev.skiff.worker-id=w-disk"}
    )
    limited = container.attrs["HostConfig"].get("StorageOpt") or {}
    if limited:
        assert limited == {"size": "5G"}
    else:
        assert b"containerDiskInGb is not applied" in harness.sinks["w-disk"].data
    await harness.provider.stop("w-disk", grace=1)
    await asyncio.wait_for(harness.exited.wait(), 60)


async def test_what_a_container_writes_to_its_own_layer_is_measured_by_worker(
    tmp_path: Path, image: str, client: Any
) -> None:
    harness = Harness(client)
    script = "head -c 3000000 /dev/zero > /filler; echo written; while true; do sleep 0.1; done"
    await harness.provider.start(launch(tmp_path, "w-layer", image, ["/bin/sh", "-c", script]))
    for _ in range(100):
        if b"written" in harness.sinks["w-layer"].data:
            break
        await asyncio.sleep(0.1)
    written = await harness.provider.layer_bytes()
    assert list(written) == ["w-layer"] and 3_000_000 <= written["w-layer"] < 4_000_000, written
    await harness.provider.stop("w-layer", grace=1)
    await asyncio.wait_for(harness.exited.wait(), 60)
    assert await harness.provider.layer_bytes() == {}


def test_a_layer_its_storage_driver_bounds_is_not_measured() -> None:
    # Docker's own record of a container created with and without the size option.
    with_size = {"HostConfig": {"StorageOpt": {"size": "5G"}}}
    assert docker_provider.bounded_layer(Container(attrs=with_size))
    assert not docker_provider.bounded_layer(Container(attrs={"HostConfig": {}}))
    assert not docker_provider.bounded_layer(Container(attrs={"HostConfig": {"StorageOpt": None}}))


def test_a_daemon_that_cannot_be_reached_measures_no_layer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A fixed API version: asking the daemon for its own would fail here already.
    gone = docker.DockerClient(base_url=f"unix://{tmp_path / 'docker.sock'}", version="1.41")
    running = {"w1": Container(attrs={"Id": "0123abcd", "HostConfig": {}})}
    assert docker_provider.Daemon(gone).layer_bytes(running) == {}
    assert "measuring containers' layers failed" in caplog.text


async def test_one_tenants_container_cannot_reach_anothers(
    tmp_path: Path, image: str, client: Any
) -> None:
    """On Docker's default bridge every container reaches every other: another tenant's code
    could call a load-balancing worker's or a pod's ports straight. skiff's network does not
    let them."""
    harness = Harness(client)
    try:
        serve = "python3 -m http.server 8080"
        await harness.provider.start(launch(tmp_path, "w-serves", image, ["/bin/sh", "-c", serve]))
        [serving] = client.containers.list(filters={"label": "dev.skiff.worker-id=w-serves"})
        serving.reload()
        networks = serving.attrs["NetworkSettings"]["Networks"]
        assert list(networks) == [NETWORK]
        address = networks[NETWORK]["IPAddress"]

        def probe(tries: int) -> str:
            return (
                "import socket, sys, time\n"
                f"for _ in range({tries}):\n"
                "    try:\n"
                f"        socket.create_connection(('{address}', 8080), timeout=3).close()\n"
                "        print('reached'); sys.exit(0)\n"
                "    except OSError as exc:\n"
                "        err = exc; time.sleep(0.1)\n"
                "print('not reached:', err)\n"
            )

        # It reaches itself at that address once its server listens ...
        itself = serving.exec_run(["python3", "-c", probe(100)])
        assert itself.output.strip() == b"reached", itself.output
        # ... and another container does not.
        await harness.provider.start(
            launch(tmp_path, "w-probes", image, ["python3", "-c", probe(1)])
        )
        await asyncio.wait_for(harness.exited.wait(), 60)
        assert b"not reached" in harness.sinks["w-probes"].data, harness.sinks["w-probes"].data
    finally:
        await harness.provider.stop_all(1)


def test_tenant_networks_made_twice_at_once_leave_one_that_every_server_uses(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before API 1.44 the daemon lets two networks share a name when two servers make it at
    the same moment, and then refuses to start a container on either ("ambiguous")."""
    name = f"skiff-tenants-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(docker_provider, "NETWORK", name)
    made = [
        client.networks.create(name, driver="bridge", options=NETWORK_OPTIONS, labels={MARKER: "1"})
        for _ in range(2)
    ]
    try:
        used = docker_provider.ensure_network(client)
        assert used == min(n.id for n in made)
        left = [n.id for n in client.networks.list(names=[name]) if n.name == name]
        assert left == [used]
        assert docker_provider.ensure_network(client) == used
    finally:
        for network in made:
            with contextlib.suppress(docker.errors.NotFound):
                network.remove()


def test_servers_on_one_host_making_the_tenant_network_at_once_make_it_once(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look and the make are one step under a host-wide lock: a start that finds two
    networks of one name fails ("ambiguous") until one of them is removed."""
    name = f"skiff-tenants-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(docker_provider, "NETWORK", name)
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            used = set(pool.map(lambda _: docker_provider.ensure_network(client), range(4)))
        made = [n.id for n in client.networks.list(names=[name]) if n.name == name]
        assert made == list(used), (made, used)
    finally:
        for network in client.networks.list(names=[name]):
            with contextlib.suppress(docker.errors.NotFound):
                network.remove()


def test_the_host_lock_goes_on_without_a_lock_file_it_cannot_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's file, refused under protected_regular: the make is not refused with it."""
    monkeypatch.setattr(docker_provider.tempfile, "gettempdir", lambda: str(tmp_path / "gone"))
    with docker_provider._host_lock("x.lock"):
        pass


def test_the_host_lock_is_given_up_after_its_wait_rather_than_held_up_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(docker_provider.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(docker_provider, "_HOST_LOCK_WAIT_SECONDS", 0.1)
    with docker_provider._host_lock("x.lock"), docker_provider._host_lock("x.lock"):
        pass
    assert (tmp_path / "x.lock").stat().st_mode & 0o777 == 0o644
