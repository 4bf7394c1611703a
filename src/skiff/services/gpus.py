"""Which GPU each worker holds. Allocation and release happen on the event loop only, so no
GPU is ever given to two workers; a GPU is freed only once its worker's process is gone."""

from __future__ import annotations

from dataclasses import dataclass

from skiff.domain.gpus import Gpu, choose


@dataclass(frozen=True, slots=True)
class GpuAssignment:
    gpu: Gpu
    worker_id: str | None


class GpuPool:
    def __init__(self, gpus: list[Gpu]) -> None:
        self._gpus = sorted(gpus, key=lambda g: g.index)
        self._assigned: dict[int, str] = {}

    @property
    def gpus(self) -> list[Gpu]:
        return list(self._gpus)

    def free(self) -> list[Gpu]:
        return [g for g in self._gpus if g.index not in self._assigned]

    def allocate(self, worker_id: str, wanted_types: list[str], count: int) -> list[Gpu] | None:
        chosen = choose(wanted_types, count, self.free())
        if chosen is None:
            return None
        for gpu in chosen:
            self._assigned[gpu.index] = worker_id
        return chosen

    def release(self, worker_id: str) -> None:
        for index in [i for i, owner in self._assigned.items() if owner == worker_id]:
            del self._assigned[index]

    def assignments(self) -> list[GpuAssignment]:
        return [GpuAssignment(g, self._assigned.get(g.index)) for g in self._gpus]
