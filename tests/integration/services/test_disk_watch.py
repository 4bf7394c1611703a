"""Process workers and pods held to their ``containerDiskInGb`` (services/disk_watch.py): the
real scaler, ``Fleet`` and ``LocalProvider`` running real processes on a real SQLite store,
the space reserved with ``fallocate`` (real blocks on the disk, written in no time)."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from eventually import eventually_async
from skiff.app import build_services, open_cluster
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.pods import Pod, PodCreate
from skiff.domain.templates import Template
from skiff.domain.users import User
from skiff.domain.volumes import NetworkVolumeCreate
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.services.disk_watch import FILES_PER_GB, DiskWatch
from skiff.services.hub import Services
from skiff.store.sqlite import SQLiteStore

GIB = 1024**3
ALICE = User(id="alice", name="alice", is_admin=False, created_at=0.0)
#: A worker that starts fine and runs until it is ended (it never calls in).
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def services(local_services: Services) -> Services:
    return local_services


def watch(services: Services) -> DiskWatch:
    assert services.disk_watch is not None, "process workers on this host are not watched"
    return services.disk_watch


async def endpoint_of(
    services: Services, disk_gb: int, workers: int, volume_id: str | None = None
) -> Endpoint:
    template = Template(
        id="t1", name="sleeper", imageName="local/sleeper", dockerStartCmd=SLEEPER
    ).model_copy(update={"containerDiskInGb": disk_gb})
    await services.store.create_template(ALICE.id, template, services.clock.now())
    spec = EndpointSpec.model_validate(
        {
            "name": "ep1",
            "templateId": "t1",
            "computeType": ComputeType.CPU,
            "workersMin": workers,
            "workersMax": workers,
            "networkVolumeId": volume_id,
        }
    )
    return await services.store.create_endpoint(
        Endpoint(id="ep1", userId=ALICE.id, version=1, createdAt=services.clock.now(), spec=spec)
    )


async def started(services: Services, endpoint: Endpoint, count: int) -> list[Worker]:
    await services.scaler.reconcile(endpoint)
    await eventually_async(
        lambda: len(services.fleet.provider.running()) == count, f"{count} worker(s) to run"
    )
    return [w for w in await services.workers.of_endpoint("ep1") if w.pid is not None]


async def one_worker(services: Services, disk_gb: int) -> tuple[Worker, Path]:
    """One worker of an endpoint with ``disk_gb`` of container disk, running, and its home."""
    (worker,) = await started(services, await endpoint_of(services, disk_gb, workers=1), 1)
    return worker, services.fleet.home("ep1", worker.id)


def reserve(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


def present(path: Path) -> bool:
    return path.exists()


async def ended_as_one_failure(services: Services) -> str:
    """Once the endpoint's workers were ended by the check: the error of its one failed
    start."""
    await eventually_async(lambda: services.fleet.provider.running() == [], "the workers to end")
    failure = await services.fleet.failure("ep1")
    # One eviction, one failed start: the back-off grows by one step, not one per worker.
    assert failure is not None and failure.failed_starts == 1
    return failure.error


async def test_a_worker_within_its_container_disk_keeps_running(services: Services) -> None:
    worker, home = await one_worker(services, disk_gb=1)
    reserve(home / "weights.bin", GIB // 2)
    await watch(services).pass_once()
    assert services.fleet.provider.running() == [worker.id]
    assert await services.fleet.failure("ep1") is None


async def test_a_worker_over_its_container_disk_is_ended_as_a_failure(
    services: Services,
) -> None:
    _worker, home = await one_worker(services, disk_gb=1)
    reserve(home / "cache" / "big.bin", GIB + GIB // 4)
    await watch(services).pass_once()
    error = await ended_as_one_failure(services)
    assert "containerDiskInGb (1 GB)" in error and "1.25 GB" in error
    # Its home goes with it, as a container's writable layer does.
    await eventually_async(lambda: not home.parent.exists(), "the worker's home to be removed")


async def test_workers_share_a_container_disk_each_across_their_homes(
    services: Services,
) -> None:
    """In the sandbox an endpoint's workers share one directory of homes: what they write
    anywhere in it is held to a container disk for each of them."""
    endpoint = await endpoint_of(services, disk_gb=1, workers=2)
    await started(services, endpoint, 2)
    shared = services.fleet.homes("ep1") / ".cache"
    reserve(shared / "one.bin", GIB)
    reserve(shared / "two.bin", GIB // 2)
    await watch(services).pass_once()
    assert len(services.fleet.provider.running()) == 2
    reserve(shared / "three.bin", GIB // 2 + GIB // 8)
    await watch(services).pass_once()
    assert "2 worker(s)" in await ended_as_one_failure(services)
    # What they shared goes too: the next workers start within their budget.
    assert not present(shared)


async def test_what_is_left_with_no_worker_running_goes_once_over_one_disk(
    services: Services, tmp_path: Path
) -> None:
    """What an ended endpoint's workers left beside their homes (a cache) is kept within one
    container disk, and removed past it, so the next workers start within budget; the home
    of a worker still recorded stays."""
    await endpoint_of(services, disk_gb=1, workers=0)
    homes = services.fleet.homes("ep1")
    now = services.clock.now()
    await services.workers.add(
        Worker(
            id="w-kept",
            endpoint_id="ep1",
            kind=WorkerKind.LOCAL,
            state=WorkerState.UNHEALTHY,
            version=1,
            started_at=now,
        )
    )
    reserve(homes / "w-kept" / "home" / "small.bin", GIB // 8)
    reserve(homes / ".flash-cache" / "deps.bin", GIB // 2)
    await watch(services).pass_once()
    assert (homes / ".flash-cache" / "deps.bin").exists()
    reserve(homes / "w-gone" / "home" / "left.bin", GIB // 2)
    outside = tmp_path / "outside"
    reserve(outside / "keep.bin", 4096)
    os.symlink(outside, homes / "to-outside")
    await watch(services).pass_once()
    assert sorted(os.listdir(homes)) == ["w-kept"]
    assert present(outside / "keep.bin"), "the link was followed"


async def test_a_template_without_a_container_disk_is_not_held(services: Services) -> None:
    endpoint = await endpoint_of(services, disk_gb=0, workers=1)
    (worker,) = await started(services, endpoint, 1)
    reserve(services.fleet.home("ep1", worker.id) / "big.bin", GIB + GIB // 4)
    await watch(services).pass_once()
    assert services.fleet.provider.running() == [worker.id]


async def pod_of(services: Services, disk_gb: int, **more: Any) -> Pod:
    services.pod_runner.leading = True
    create = PodCreate.model_validate(
        {
            "imageName": "local/python",
            "computeType": "CPU",
            "volumeInGb": 0,
            "containerDiskInGb": disk_gb,
            "dockerStartCmd": SLEEPER,
            **more,
        }
    )
    pod = await services.pods.create(ALICE, create)

    async def running() -> bool:
        await services.pod_runner.reconcile()
        return services.pod_runner.running_ids() == [pod.id]

    await eventually_async(running, "the pod to run")
    return pod


async def test_a_pod_over_its_container_disk_is_ended_and_starts_on_a_fresh_one(
    services: Services,
) -> None:
    pod = await pod_of(services, disk_gb=1)
    home = services.pod_runner.home(pod.id)
    reserve(home / "within.bin", GIB // 2)
    await watch(services).pass_once()
    assert services.pod_runner.running_ids() == [pod.id]
    reserve(home / "over.bin", GIB // 2 + GIB // 8)
    await watch(services).pass_once()
    assert services.pod_runner.running_ids() == []
    # Its disk is wiped at once, not at a next start that may not come (its user stops it).
    assert not present(home / "over.bin")
    shown = await services.pods.get(ALICE, pod.id)
    problem = shown.placement.problem or ""
    assert "over containerDiskInGb (1 GB)" in problem and "starts again in 1 s" in problem
    services.clock.advance(1.5)

    async def started_again() -> bool:
        await services.pod_runner.reconcile()
        return services.pod_runner.running_ids() == [pod.id]

    await eventually_async(started_again, "the pod to start again")


async def test_a_measure_of_one_instance_never_ends_the_next(services: Services) -> None:
    """A count may take long: the pod reset meanwhile (or crashed and started afresh) runs an
    instance on a wiped disk, which the count of the one before must not end."""
    pod = await pod_of(services, disk_gb=1)
    measured = services.pod_runner.instance(pod.id)
    assert measured is not None
    await services.pods.stop(ALICE, pod.id)
    await services.pod_runner.reconcile()
    await services.pods.start(ALICE, pod.id)

    async def started_again() -> bool:
        await services.pod_runner.reconcile()
        return services.pod_runner.instance(pod.id) not in (None, measured)

    await eventually_async(started_again, "a fresh instance")
    await services.pod_runner.evict(pod.id, measured, "over its container disk")
    assert services.pod_runner.running_ids() == [pod.id]
    shown = await services.pods.get(ALICE, pod.id)
    assert shown.placement.problem is None


async def test_a_pod_its_user_just_stopped_is_not_evicted(services: Services) -> None:
    pod = await pod_of(services, disk_gb=1)
    instance = services.pod_runner.instance(pod.id)
    assert instance is not None
    await services.pods.stop(ALICE, pod.id)  # the pod pass that ends it has not run yet
    await services.pod_runner.evict(pod.id, instance, "over its container disk")
    shown = await services.pods.get(ALICE, pod.id)
    assert "over its container disk" not in (shown.placement.problem or "")


async def test_a_pod_without_a_container_disk_is_not_held(services: Services) -> None:
    pod = await pod_of(services, disk_gb=0)
    reserve(services.pod_runner.home(pod.id) / "big.bin", GIB + GIB // 4)
    await watch(services).pass_once()
    assert services.pod_runner.running_ids() == [pod.id]


async def test_the_check_can_be_turned_off(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock
) -> None:
    settings = Settings(data_dir=tmp_path / "data", disk_check_seconds=0)
    assert build_services(settings, store, clock, open_cluster(settings)).disk_watch is None


def many_files(directory: Path, count: int) -> None:
    """``count`` empty files: no bytes to speak of, an inode each."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        os.close(os.open(directory / str(n), os.O_CREAT | os.O_WRONLY, 0o600))


async def test_workers_over_the_files_their_container_disk_holds_are_ended(
    services: Services,
) -> None:
    worker, home = await one_worker(services, disk_gb=1)
    many_files(home / "few", FILES_PER_GB // 2)
    await watch(services).pass_once()
    assert services.fleet.provider.running() == [worker.id]
    many_files(home / "more", FILES_PER_GB // 2 + 10)
    await watch(services).pass_once()
    error = await ended_as_one_failure(services)
    assert "files, over the 65,536 that containerDiskInGb (1 GB) holds" in error


async def test_a_pod_over_the_files_its_container_disk_holds_is_ended_and_wiped(
    services: Services,
) -> None:
    pod = await pod_of(services, disk_gb=1)
    home = services.pod_runner.home(pod.id)
    many_files(home / "tiny", FILES_PER_GB + 1)
    await watch(services).pass_once()
    assert services.pod_runner.running_ids() == []
    assert not present(home / "tiny")
    shown = await services.pods.get(ALICE, pod.id)
    # The files and their directory.
    assert "65,538 files, over the 65,536" in (shown.placement.problem or "")


async def volume_of(services: Services, size_gb: int) -> str:
    made = await services.volumes.create(
        ALICE, NetworkVolumeCreate.model_validate({"name": "data", "size": size_gb})
    )
    return made.volume.id


async def test_what_mounts_a_network_volume_written_over_its_size_is_ended(
    services: Services,
) -> None:
    volume_id = await volume_of(services, size_gb=1)
    endpoint = await endpoint_of(services, disk_gb=5, workers=1, volume_id=volume_id)
    await started(services, endpoint, 1)
    pod = await pod_of(services, disk_gb=5, networkVolumeId=volume_id)
    files = services.volumes.path(volume_id)
    reserve(files / "within.bin", GIB // 2)
    await watch(services).pass_once()
    assert len(services.fleet.provider.running()) == 1
    assert services.pod_runner.running_ids() == [pod.id]

    reserve(files / "over.bin", GIB // 2 + GIB // 8)
    await watch(services).pass_once()
    error = await ended_as_one_failure(services)
    assert f"network volume {volume_id} held 1.13 GB, over its size (1 GB)" in error
    assert services.pod_runner.running_ids() == []
    shown = await services.pods.get(ALICE, pod.id)
    assert f"network volume {volume_id} held" in (shown.placement.problem or "")
    # A volume keeps its files: its user grows it or removes some.
    assert present(files / "over.bin")


async def test_a_pod_over_its_own_volume_is_ended_and_its_volume_kept(
    services: Services,
) -> None:
    pod = await pod_of(services, disk_gb=5, volumeInGb=1)
    files = services.pod_runner.volume_dir(pod.id)
    reserve(files / "over.bin", GIB + GIB // 8)
    await watch(services).pass_once()
    assert services.pod_runner.running_ids() == []
    shown = await services.pods.get(ALICE, pod.id)
    assert "its volume held 1.13 GB, over volumeInGb (1 GB)" in (shown.placement.problem or "")
    assert present(files / "over.bin")


async def test_workers_over_both_their_disk_and_their_volume_are_ended_once(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume_id = await volume_of(services, size_gb=1)
    endpoint = await endpoint_of(services, disk_gb=1, workers=1, volume_id=volume_id)
    (worker,) = await started(services, endpoint, 1)
    reserve(services.fleet.home("ep1", worker.id) / "weights.bin", GIB + GIB // 8)
    reserve(services.volumes.path(volume_id) / "over.bin", GIB + GIB // 8)
    reads = counted(services, monkeypatch, "get_endpoint")
    await watch(services).pass_once()
    # Ended for its container disk; the volume's check finds nothing of it left to end.
    assert "over containerDiskInGb (1 GB)" in await ended_as_one_failure(services)
    # The volume's check used what the disk check read: the endpoint is read once a pass.
    assert reads == ["ep1"]


async def test_a_pod_and_its_network_volume_are_read_once_a_pass(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume_id = await volume_of(services, size_gb=1)
    pod = await pod_of(services, disk_gb=5, networkVolumeId=volume_id)
    reads = counted(services, monkeypatch, "find_pod")
    await watch(services).pass_once()
    assert reads == [pod.id]
    assert services.pod_runner.running_ids() == [pod.id]


def counted(services: Services, monkeypatch: pytest.MonkeyPatch, method: str) -> list[str]:
    """The ids the disk check asks the store's ``method`` for from now on (it still answers;
    others' reads, such as the fleet's as a worker ends, are not counted)."""
    asked: list[str] = []
    real = getattr(services.store, method)

    async def counting(key: str) -> Any:
        if traceback.extract_stack()[-2].filename.endswith("disk_watch.py"):
            asked.append(key)
        return await real(key)

    monkeypatch.setattr(services.store, method, counting)
    return asked


async def test_one_pod_whose_check_fails_holds_up_no_volume_check(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume_id = await volume_of(services, size_gb=1)
    endpoint = await endpoint_of(services, disk_gb=5, workers=1, volume_id=volume_id)
    await started(services, endpoint, 1)
    pod = await pod_of(services, disk_gb=5, volumeInGb=1)
    reserve(services.volumes.path(volume_id) / "over.bin", GIB + GIB // 8)
    find_pod = services.store.find_pod

    async def failing_for_the_pod(pod_id: str) -> Pod | None:
        if pod_id == pod.id:
            raise ConnectionError("the store went away for this read")
        return await find_pod(pod_id)

    # A store read failing is the one fault here that real components cannot be made to show.
    monkeypatch.setattr(services.store, "find_pod", failing_for_the_pod)
    await watch(services).pass_once()
    assert f"network volume {volume_id} held" in await ended_as_one_failure(services)
    assert services.pod_runner.running_ids() == [pod.id]
