"""The default server-wide worker limit: what the host can hold."""

from __future__ import annotations

from skiff.providers.capacity import host_worker_limit, worker_limit

GIB = 1024**3


def test_the_limit_is_the_lesser_of_16_per_cpu_and_one_per_256_mib() -> None:
    assert worker_limit(2, 24 * GIB) == 32  # CPU-bound
    assert worker_limit(16, 8 * GIB) == 32  # memory-bound
    assert worker_limit(16, 128 * GIB) == 256


def test_the_limit_is_at_least_one_and_uses_cpus_alone_without_a_memory_figure() -> None:
    assert worker_limit(1, 100 * 1024 * 1024) == 1
    assert worker_limit(0, None) == 16
    assert worker_limit(4, None) == 64


def test_this_host_has_a_limit() -> None:
    assert host_worker_limit() >= 1
