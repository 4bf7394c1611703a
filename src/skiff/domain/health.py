"""An endpoint's health: its jobs by state, its workers by state, and what holds them back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skiff.domain.jobs import JobCounts
from skiff.domain.placement import Blocker, placement_view
from skiff.domain.workers import WorkerState


@dataclass(frozen=True, slots=True)
class Health:
    jobs: JobCounts
    #: Every state, counted (0 for a state no worker is in).
    workers: Mapping[WorkerState, int]
    #: Why its workers are held back, if they are.
    placement: Blocker | None


def health_view(health: Health) -> dict[str, Any]:
    """The ``/health`` body (and the console's counts)."""
    counts = health.jobs
    workers = health.workers
    report: dict[str, Any] = {
        "jobs": {
            "completed": counts.completed,
            "failed": counts.failed,
            "inProgress": counts.in_progress,
            "inQueue": counts.in_queue,
            "retried": counts.retried,
            "cancelled": counts.cancelled,
            "timedOut": counts.timed_out,
        },
        "workers": {
            "idle": workers[WorkerState.IDLE],
            "running": workers[WorkerState.RUNNING],
            "initializing": workers[WorkerState.INITIALIZING],
            "ready": workers[WorkerState.IDLE],
            "throttled": workers[WorkerState.THROTTLED],
            "unhealthy": workers[WorkerState.UNHEALTHY],
            # flashboot: started and ready to be put to work, not taking jobs yet.
            "standby": workers[WorkerState.STANDBY],
        },
    }
    if health.placement is not None:
        # An extra key (the SDK's health() returns the JSON as it is): jobs that wait on
        # an endpoint that cannot place a worker say why instead of waiting in silence.
        report["placement"] = placement_view(health.placement)
    return report
