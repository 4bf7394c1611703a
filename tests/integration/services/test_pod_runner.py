"""The pod runner on a real SQLite store, with pods run as real processes by the local pod
provider and time on a manual clock: a pod that exits starts again after a back-off that doubles,
its exit shown meanwhile; GPUs come from the workers' pool and are never shared; a leader that
takes over forgets the placements of instances it did not find."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from eventually import eventually_async
from skiff.clock import ManualClock
from skiff.domain.gpus import Gpu
from skiff.domain.pods import (
    DesiredStatus,
    Pod,
    PodCreate,
    PodPlacement,
    PodUpdate,
    spec_from_create,
)
from skiff.domain.users import User
from skiff.errors import Conflict
from skiff.providers.local_pods import LocalPodProvider
from skiff.services.gpus import GpuPool
from skiff.services.logs import WorkerLogs
from skiff.services.pod_runner import PodRunner, gpu_holder
from skiff.services.pods import Pods
from skiff.services.volumes import Volumes
from skiff.services.wakeups import Wakeups
from skiff.store.sqlite import SQLiteStore
from skiff.volume_dirs import VolumeDirs

RTX = "NVIDIA GeForce RTX 4090"
#: A pod that runs until it is stopped.
SLEEP = "import time; time.sleep(600)"
ALICE = User(id="alice", name="alice", is_admin=False, created_at=0.0)


@dataclass
class Running:
    runner: PodRunner
    pods: Pods
    gpus: GpuPool
    store: SQLiteStore
    clock: ManualClock
    pod_dirs: VolumeDirs


@pytest.fixture
async def running(store: SQLiteStore, clock: ManualClock, tmp_path: Path) -> AsyncIterator[Running]:
    wakeups = Wakeups()
    gpus = GpuPool([Gpu(0, RTX), Gpu(1, RTX)])
    logs = WorkerLogs(tmp_path, folder="pod-logs")
    exits: list[tuple[str, int]] = []

    async def exited(pod_id: str, code: int) -> None:
        exits.append((pod_id, code))
        await runner.on_exit(pod_id, code)

    pod_dirs = VolumeDirs(tmp_path / "volumes" / "pods")
    runner = PodRunner(
        store,
        clock,
        wakeups,
        gpus,
        LocalPodProvider(exited, logs=logs.sink),
        logs,
        pod_dirs,
        tmp_path / "pods",
        Volumes(store, clock, VolumeDirs(tmp_path / "volumes")),
        "replica-1",
        stop_grace=1.0,
        public_host="127.0.0.1",
    )
    runner.leading = True
    pods = Pods(store, clock, wakeups, runner, pod_dirs)
    yield Running(runner, pods, gpus, store, clock, pod_dirs)
    await runner.shutdown()


def pod_input(*command: str, **fields: object) -> PodCreate:
    return PodCreate.model_validate(
        {
            "imageName": "local/python",
            "computeType": "CPU",
            "volumeInGb": 0,
            "dockerStartCmd": [sys.executable, "-c", *command],
            **fields,
        }
    )


async def settled(running: Running, pod_id: str, check: Callable[[Pod], bool]) -> Pod:
    """The pod once ``check(pod)`` holds; the runner's starts run in the background, so each
    look reconciles first."""

    async def looked() -> Pod | None:
        await running.runner.reconcile()
        pod = await running.pods.get(ALICE, pod_id)
        return pod if check(pod) else None

    return await eventually_async(looked, f"pod {pod_id} to settle as wanted")


async def test_a_pod_that_exits_starts_again_after_a_back_off_that_doubles(
    running: Running,
) -> None:
    pod = await running.pods.create(ALICE, pod_input("raise SystemExit(3)"))

    first = await settled(running, pod.id, lambda p: p.placement.problem is not None)
    assert "exited with code 3" in first.placement.problem
    assert "starts again in 1 s" in first.placement.problem
    # Not before its time: passes start nothing.
    for _ in range(5):
        await running.runner.reconcile()
    assert running.runner.provider.running() == []

    running.clock.advance(1.5)
    second = await settled(running, pod.id, lambda p: "in 2 s" in (p.placement.problem or ""))
    assert "exited with code 3" in (second.placement.problem or "")


async def test_a_pod_that_exits_while_its_start_is_recorded_shows_its_exit_not_running(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The exit is reported (the problem written) before the start's own record lands, as when
    # a process ends at once: the record must not hide the exit until the next start.
    write = running.store.set_pod_placement
    exit_reported, start_recorded = asyncio.Event(), asyncio.Event()

    async def exit_first(pod_id: str, placement: PodPlacement, started: float | None) -> object:
        if not placement.owner:
            exit_reported.set()
            return await write(pod_id, placement, started)
        await asyncio.wait_for(exit_reported.wait(), 15)
        written = await write(pod_id, placement, started)
        start_recorded.set()
        return written

    monkeypatch.setattr(running.store, "set_pod_placement", exit_first)
    pod = await running.pods.create(ALICE, pod_input("raise SystemExit(3)"))
    shown = await settled(
        running, pod.id, lambda p: start_recorded.is_set() and p.placement.owner is None
    )
    assert "exited with code 3" in (shown.placement.problem or "")


async def test_a_stopped_pod_keeps_its_volume_and_not_its_disk(running: Running) -> None:
    """Its container disk goes with its instance, as on the hosted platform: a stopped pod holds
    no disk of this host's but its volume."""
    pod = await running.pods.create(ALICE, pod_input(SLEEP, volumeInGb=1))
    await settled(running, pod.id, lambda p: p.placement.owner == "replica-1")
    home = running.runner.home(pod.id)
    await asyncio.to_thread((home / "scratch.txt").write_text, "gone on stop")
    volume = running.pod_dirs.path(pod.id)
    await asyncio.to_thread((volume / "kept.txt").write_text, "kept")
    await running.pods.stop(ALICE, pod.id)
    await settled(running, pod.id, lambda p: p.placement.owner is None)
    assert not await asyncio.to_thread(home.exists)
    assert await asyncio.to_thread((volume / "kept.txt").read_text) == "kept"


async def test_a_stopped_pod_starts_at_once_when_asked_whatever_its_back_off(
    running: Running,
) -> None:
    pod = await running.pods.create(ALICE, pod_input("raise SystemExit(1)"))
    await settled(running, pod.id, lambda p: p.placement.problem is not None)
    await running.pods.stop(ALICE, pod.id)
    await running.runner.reconcile()
    await running.pods.update(
        ALICE, pod.id, PodUpdate(dockerStartCmd=[sys.executable, "-c", SLEEP])
    )
    await running.pods.start(ALICE, pod.id)
    started = await settled(running, pod.id, lambda p: p.placement.owner == "replica-1")
    assert started.placement.problem is None


async def test_a_gpu_pod_holds_its_gpu_in_the_workers_pool_until_it_stops(
    running: Running,
) -> None:
    wants_gpu = {"computeType": "GPU", "gpuTypeIds": [RTX], "gpuCount": 1}
    worker_gpu = running.gpus.allocate("worker-1", [RTX], 1)
    assert worker_gpu is not None
    pod = await running.pods.create(ALICE, pod_input(SLEEP, **wants_gpu))
    # Reserved when created: the other RTX, never the worker's.
    held = [a.gpu.index for a in running.gpus.assignments() if a.worker_id == gpu_holder(pod.id)]
    assert held == [1 - worker_gpu[0].index]
    placed = await settled(running, pod.id, lambda p: p.placement.owner is not None)
    assert placed.placement.gpuIds == held and placed.placement.gpuName == RTX

    with pytest.raises(Conflict, match="no 1 GPU"):
        await running.pods.create(ALICE, pod_input(SLEEP, **wants_gpu))
    assert running.gpus.allocate("worker-2", [RTX], 1) is None

    await running.pods.stop(ALICE, pod.id)
    await settled(running, pod.id, lambda p: p.placement.owner is None)
    assert [a.worker_id for a in running.gpus.assignments() if a.worker_id] == ["worker-1"]


async def test_a_gpu_pod_stopped_before_it_started_gives_its_reserved_gpus_back(
    running: Running,
) -> None:
    """Its GPUs were taken when it was asked to run (created, started): stopped before a pass
    started it (by its user, or for its user's being disabled), it runs nowhere and holds none."""
    wants_gpu = {"computeType": "GPU", "gpuTypeIds": [RTX], "gpuCount": 2}
    pod = await running.pods.create(ALICE, pod_input(SLEEP, **wants_gpu))
    assert running.gpus.free() == []
    await running.pods.stop(ALICE, pod.id)

    await running.runner.reconcile()

    assert running.runner.running_ids() == [] and len(running.gpus.free()) == 2
    other = await running.pods.create(ALICE, pod_input(SLEEP, **wants_gpu))
    await running.pods.delete(ALICE, other.id)


async def test_a_pass_while_a_start_is_written_leaves_the_gpus_it_reserved(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start takes the pod's GPUs, then writes that the pod is wanted running. A pass in
    between still reads it stopped: it must not give those GPUs back, or a worker could take
    them and the start, answered as placed, would wait for GPUs after all."""
    wants_gpu = {"computeType": "GPU", "gpuTypeIds": [RTX], "gpuCount": 2}
    pod = await running.pods.create(ALICE, pod_input(SLEEP, **wants_gpu))
    await settled(running, pod.id, lambda p: p.placement.owner is not None)
    await running.pods.stop(ALICE, pod.id)
    await settled(running, pod.id, lambda p: p.placement.owner is None)
    write = running.store.update_pod_settings

    async def passed_then_written(changed: Pod) -> Pod | None:
        await running.runner.reconcile()
        assert running.gpus.allocate("worker-1", [RTX], 1) is None
        return await write(changed)

    monkeypatch.setattr(running.store, "update_pod_settings", passed_then_written)
    await running.pods.start(ALICE, pod.id)
    monkeypatch.undo()

    placed = await settled(running, pod.id, lambda p: p.placement.owner is not None)
    assert sorted(placed.placement.gpuIds) == [0, 1]


async def test_a_gpu_pod_of_a_type_the_server_lacks_is_refused_naming_it(
    running: Running,
) -> None:
    with pytest.raises(Conflict, match=r"has no 1 GPU\(s\) of one type among \[NVIDIA H100\]"):
        await running.pods.create(
            ALICE, pod_input(SLEEP, computeType="GPU", gpuTypeIds=["NVIDIA H100"])
        )
    assert await running.store.list_pods(None) == []


async def test_a_new_leader_forgets_placements_of_instances_it_did_not_find(
    running: Running, store: SQLiteStore, clock: ManualClock
) -> None:
    spec = spec_from_create(pod_input(SLEEP), None)
    stale = Pod(
        id="p-stale",
        userId=ALICE.id,
        spec=spec,
        desiredStatus=DesiredStatus.EXITED,
        createdAt=clock.now(),
        lastStatusChange=clock.now(),
    )
    await store.create_pod(stale)
    await store.set_pod_placement(
        stale.id, PodPlacement(owner="a-dead-replica", portMappings={"8888/http": 8888}), None
    )
    await running.runner.forget_lost()
    after = await store.get_pod(ALICE.id, stale.id)
    assert after is not None and after.placement == PodPlacement()
