"""How many worker processes this host can hold, for ``SKIFF_MAX_WORKERS`` left unset.

A worker is a Python process running the runpod SDK and a handler: mostly waiting on a long
poll, but each holds its interpreter, imports and whatever model it loads. The bound is the
lesser of 16 per CPU (enough that CPU-light handlers never starve for workers) and one per
256 MiB of memory (a bare SDK worker uses about 60 MiB; handlers load more), and at least 1.
"""

from __future__ import annotations

import os

WORKERS_PER_CPU = 16
MEMORY_PER_WORKER = 256 * 1024 * 1024


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity), else the host's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on every platform
        return os.cpu_count() or 1


def memory_bytes() -> int | None:
    """The host's physical memory, None where the platform does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def worker_limit(cpus: int, memory: int | None) -> int:
    """``min(16 x cpus, memory / 256 MiB)``, at least 1 (the CPU bound alone without memory)."""
    by_cpu = WORKERS_PER_CPU * max(1, cpus)
    if memory is None:
        return by_cpu
    return max(1, min(by_cpu, memory // MEMORY_PER_WORKER))


def host_worker_limit() -> int:
    return worker_limit(cpu_count(), memory_bytes())
