"""How many workers an endpoint wants: a pure decision, tested on tables of situations."""

from __future__ import annotations

from dataclasses import dataclass, field

from skiff.domain.workers import Worker, WorkerKind, WorkerState


@dataclass(frozen=True, slots=True)
class Load:
    #: Normal-priority jobs waiting. Low-priority ones never raise the worker count.
    queued: int
    in_progress: int


@dataclass(frozen=True, slots=True)
class Limits:
    workers_min: int
    workers_max: int
    idle_timeout_s: float
    version: int


@dataclass(frozen=True, slots=True)
class Decision:
    start: int = 0
    stop: list[str] = field(default_factory=list)


def decide(limits: Limits, load: Load, workers: list[Worker], now: float) -> Decision:
    """Start workers when jobs wait (up to the maximum), keep the minimum, stop idle ones.

    Only local workers are started or stopped; external ones count as capacity.
    A worker of an older version is stopped once it is idle, so a rolled endpoint's
    workers are replaced without cutting a job short.
    """
    live = [w for w in workers if w.is_live]
    managed = [w for w in live if w.kind is WorkerKind.LOCAL]
    stop: list[str] = []

    # Outdated or recycled workers leave as soon as they hold no job.
    for w in managed:
        if (w.version != limits.version or w.recycle) and w.state is not WorkerState.RUNNING:
            stop.append(w.id)
    current = [w for w in live if w.id not in stop]
    current_count = len(current)

    needed = load.in_progress + load.queued
    wanted = max(limits.workers_min, min(limits.workers_max, needed))
    # Outdated workers still running a job count against the maximum.
    outgoing = sum(1 for w in current if w.version != limits.version or w.recycle)
    start = max(0, min(wanted, limits.workers_max) - (current_count - outgoing))
    # Workers on their way out still hold a process (and maybe a GPU) until they are gone.
    stopping = sum(1 for w in workers if w.state is WorkerState.STOPPING)
    start = min(start, max(0, limits.workers_max - current_count - stopping))

    surplus = current_count - max(limits.workers_min, wanted)
    if surplus > 0:
        idle = sorted(
            (
                w
                for w in current
                if w.kind is WorkerKind.LOCAL
                and w.state is WorkerState.IDLE
                and w.idle_since is not None
                and (
                    now - w.idle_since >= limits.idle_timeout_s
                    or current_count > limits.workers_max
                )
            ),
            key=lambda w: w.idle_since or 0.0,
        )
        stop.extend(w.id for w in idle[:surplus])
    return Decision(start=start, stop=stop)
