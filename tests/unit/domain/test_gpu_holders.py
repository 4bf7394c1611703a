"""Who holds each GPU, workers and pods alike (``domain/gpu_holders``): what ``skiff gpus`` and
the console's pods page show."""

from __future__ import annotations

from skiff.domain.gpu_holders import gpu_holders
from skiff.domain.pods import DesiredStatus, Pod, PodCreate, PodPlacement, spec_from_create
from skiff.domain.workers import Worker, WorkerKind, WorkerState


def worker(worker_id: str, state: WorkerState, gpu_ids: str | None) -> Worker:
    return Worker(
        id=worker_id,
        endpoint_id="ep",
        kind=WorkerKind.LOCAL,
        state=state,
        version=1,
        started_at=0.0,
        gpu_ids=gpu_ids,
    )


def pod(pod_id: str, placement: PodPlacement) -> Pod:
    spec = spec_from_create(PodCreate(imageName="local/python", name=f"name-{pod_id}"), None)
    return Pod(
        id=pod_id,
        userId="u",
        spec=spec,
        desiredStatus=DesiredStatus.RUNNING,
        createdAt=0.0,
        lastStatusChange=0.0,
        placement=placement,
    )


def test_workers_and_pods_are_named_for_the_gpus_they_hold() -> None:
    held = gpu_holders(
        [worker("w1", WorkerState.IDLE, "0,1")],
        [pod("p1", PodPlacement(owner="replica", gpuName="RTX", gpuIds=[2]))],
    )
    assert held == {0: "ep/w1 (idle)", 1: "ep/w1 (idle)", 2: "pod p1 (name-p1)"}


def test_a_throttled_worker_and_an_unplaced_pod_hold_nothing() -> None:
    held = gpu_holders(
        [worker("w1", WorkerState.THROTTLED, "0")],
        [pod("p1", PodPlacement(gpuIds=[1], problem="no GPU free"))],
    )
    assert held == {}
