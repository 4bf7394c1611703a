"""Which CPU each side runs on.

The server under test (skiff with every worker it starts, or the reference) runs on
``SERVER_CPU``; the load generator and this orchestrator run on ``LOAD_CPU``. Pinning is set in
the child before it execs (``preexec_fn``), so everything the server starts later (skiff's
workers and their heartbeat processes) inherits it. On a machine with a single CPU nothing is
pinned and the report says so.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVER_CPU = 0
LOAD_CPU = 1


def _all_cpus() -> set[int]:
    return set(range(os.cpu_count() or 1))


def enabled() -> bool:
    cpus = _all_cpus()
    return SERVER_CPU in cpus and LOAD_CPU in cpus


def pin_to_server_cpu() -> None:
    if enabled():
        os.sched_setaffinity(0, {SERVER_CPU})


def pin_to_load_cpu() -> None:
    if enabled():
        os.sched_setaffinity(0, {LOAD_CPU})


def describe() -> str:
    if not enabled():
        return "not pinned (fewer than 2 CPUs)"
    return (
        f"server under test (and its workers) on CPU {SERVER_CPU}; "
        f"load generator and orchestrator on CPU {LOAD_CPU}"
    )
