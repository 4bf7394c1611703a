"""Who holds each GPU of a host, serverless workers and pods alike, in words (``skiff gpus``,
the console's pods page): pure, from the records the store keeps."""

from __future__ import annotations

from collections.abc import Iterable

from skiff.domain.pods import Pod
from skiff.domain.workers import Worker, WorkerState


def gpu_holders(workers: Iterable[Worker], pods: Iterable[Pod]) -> dict[int, str]:
    """GPU index -> ``endpoint/worker (state)`` or ``pod <id> (<name>)``. A throttled worker
    waits for a GPU and holds none; a pod holds its GPUs while its instance is placed."""
    held: dict[int, str] = {}
    for worker in workers:
        if worker.gpu_ids and worker.state is not WorkerState.THROTTLED:
            for text in worker.gpu_ids.split(","):
                held[int(text)] = f"{worker.endpoint_id}/{worker.id} ({worker.state.value})"
    for pod in pods:
        if pod.placement.owner:
            for index in pod.placement.gpuIds:
                held[index] = f"pod {pod.id} ({pod.spec.name})"
    return held
