"""Which GPU each worker holds. Allocation and release happen on the event loop only, so no
GPU is ever given to two workers; a GPU is freed only once its worker's process is gone.

The inventory is this host's, fixed at start, or a cluster's (the Ray provider), read again
while the server runs (``replace``): a machine that joins adds its GPUs, one that leaves takes
its GPUs away, and what its workers held with them."""

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

    def replace(self, gpus: list[Gpu]) -> bool:
        """The inventory is now ``gpus`` (a cluster's, read again); whether it changed. A GPU
        that stays keeps its holder."""
        gpus = sorted(gpus, key=lambda g: g.index)
        if gpus == self._gpus:
            return False
        present = {g.index for g in gpus}
        self._assigned = {i: w for i, w in self._assigned.items() if i in present}
        self._gpus = gpus
        return True

    def hold(self, worker_id: str, node: str, name: str, count: int) -> list[Gpu] | None:
        """Record that a worker found running (adopted from an earlier leader) holds ``count``
        GPUs of type ``name`` on ``node``; None when that many are not free there."""
        free = [g for g in self.free() if g.node == node and g.name == name]
        if len(free) < count:
            return None
        for gpu in free[:count]:
            self._assigned[gpu.index] = worker_id
        return free[:count]

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
