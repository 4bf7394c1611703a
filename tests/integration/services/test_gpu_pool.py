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


def test_a_cluster_inventory_read_again_keeps_the_holders_of_gpus_that_stay() -> None:
    pool = GpuPool([Gpu(0, RTX, node="a"), Gpu(1, H100, node="b")])
    assert pool.allocate("on-a", [RTX], 1) == [Gpu(0, RTX, node="a")]
    assert pool.allocate("on-b", [H100], 1) == [Gpu(1, H100, node="b")]
    # Node b leaves, node c joins: b's GPU and its holding go, c's GPU is free.
    assert pool.replace([Gpu(0, RTX, node="a"), Gpu(2, H100, node="c")])
    assert [(h.gpu.index, h.worker_id) for h in pool.assignments()] == [(0, "on-a"), (2, None)]
    assert not pool.replace([Gpu(2, H100, node="c"), Gpu(0, RTX, node="a")])


def test_a_worker_taken_over_holds_gpus_of_its_type_on_its_node() -> None:
    pool = GpuPool([Gpu(0, RTX, node="a"), Gpu(1, RTX, node="b"), Gpu(2, RTX, node="b")])
    assert pool.hold("found", "b", RTX, 2) == [Gpu(1, RTX, node="b"), Gpu(2, RTX, node="b")]
    assert pool.hold("another", "b", RTX, 1) is None
    assert pool.hold("typo", "a", H100, 1) is None
    assert pool.allocate("new", [RTX], 1) == [Gpu(0, RTX, node="a")]
