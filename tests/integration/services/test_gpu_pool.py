"""The GPU pool: no GPU is ever held by two workers, and a freed one can be taken again."""

from __future__ import annotations

from skiff.domain.gpus import Gpu
from skiff.services.gpus import GpuPool

RTX = "NVIDIA GeForce RTX 4090"
H100 = "NVIDIA H100 80GB HBM3"


def test_no_gpu_is_ever_given_to_two_workers() -> None:
    pool = GpuPool([Gpu(0, RTX), Gpu(1, RTX), Gpu(2, H100)])
    taken = [pool.allocate(f"w{i}", [RTX, H100], 1) for i in range(4)]
    assert [g[0].index if g else None for g in taken] == [0, 1, 2, None]


def test_a_released_gpu_can_be_taken_again() -> None:
    pool = GpuPool([Gpu(0, H100)])
    assert pool.allocate("a", [H100], 1) == [Gpu(0, H100)]
    assert pool.allocate("b", [H100], 1) is None
    pool.release("a")
    assert pool.allocate("b", [H100], 1) == [Gpu(0, H100)]
    assert [(h.gpu.index, h.worker_id) for h in pool.assignments()] == [(0, "b")]
