"""How many workers an endpoint wants: a pure decision, tested on tables of situations.

- ``REQUEST_COUNT``: aim at ``ceil((inQueue + inProgress) / scalerValue)`` workers.
- ``QUEUE_DELAY``: add a worker when the oldest waiting job has waited longer than
  ``scalerValue`` seconds (one at a time: not while another is still starting). With no worker
  at all, a waiting job starts one at once: nobody should wait out the delay on a cold start.
- Always between ``workersMin`` and ``workersMax``; ``lowPriority`` jobs are not in the load.
- A worker idle for ``idleTimeout`` seconds is stopped, never below ``workersMin``. A worker
  still starting (``initializing``) counts as idle since its start: on a scale-down it goes
  first (it serves nothing yet), and at once when the endpoint is over ``workersMax``.
- A local worker that has not called in ``start_timeout`` seconds after its start is overdue
  (``overdue_starts``): the fleet ends it as a failed start.
- Workers of an older version (or that asked to be recycled) leave once they hold no job.
- Throttled and unhealthy workers (wanted, but without a process yet) count as workers, so
  waiting for a GPU never makes the scaler ask for more.
- ``flashboot``: one more worker is kept started but held back (``standby``: its imports done,
  not taking jobs), within ``workersMax``. A scale-up promotes it instead of starting a
  process, and a worker stopped for idleness becomes the standby instead, if there is none.
- An endpoint whose owner is disabled wants no worker: every local one stops, busy ones too
  (their calls are refused, so they could finish nothing; their jobs go back to the queue as
  any stopped worker's do), and none starts, whatever ``workersMin`` or the queue says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from skiff.domain.endpoints import ScalerType
from skiff.domain.workers import Worker, WorkerKind, WorkerState


@dataclass(frozen=True, slots=True)
class Load:
    #: Normal-priority jobs waiting. Low-priority ones never raise the worker count.
    queued: int
    in_progress: int
    #: How long the oldest normal-priority job has waited, in seconds.
    oldest_wait_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Limits:
    workers_min: int
    workers_max: int
    idle_timeout_s: float
    version: int
    scaler_type: ScalerType = ScalerType.QUEUE_DELAY
    scaler_value: int = 4
    flashboot: bool = False
    #: The endpoint's owner is disabled: no worker of theirs runs (``halt``).
    owner_disabled: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    start: int = 0
    stop: list[str] = field(default_factory=list)
    #: Standby workers to put to work (instead of starting that many).
    promote: list[str] = field(default_factory=list)
    #: Idle workers to hold back as the standby (instead of stopping them).
    demote: list[str] = field(default_factory=list)
    #: Standby workers to start.
    start_standby: int = 0


def _target(limits: Limits, load: Load, current: list[Worker]) -> int:
    """How many workers the load asks for, before the min/max clamp."""
    if limits.scaler_type is ScalerType.REQUEST_COUNT:
        return math.ceil((load.queued + load.in_progress) / max(1, limits.scaler_value))
    count = len(current)
    if load.queued == 0:
        return 0
    if count == 0:
        return 1
    starting = any(w.state is WorkerState.INITIALIZING or w.is_pending for w in current)
    if load.oldest_wait_s > limits.scaler_value and not starting:
        return count + 1
    return count


def decide(limits: Limits, load: Load, workers: list[Worker], now: float) -> Decision:
    """``serve``, then the standby: promote it rather than start a process, keep one ready
    while there is room under the maximum (``flashboot``), stop the rest."""
    if limits.owner_disabled:
        return halt(workers)
    standby = [w for w in workers if w.state is WorkerState.STANDBY]
    serving = [w for w in workers if w.state is not WorkerState.STANDBY]
    base = serve(limits, load, serving, now)
    stop = list(base.stop)
    fresh = [w for w in standby if w.version == limits.version and not w.recycle]
    if not limits.flashboot:
        fresh = []
    promote = [w.id for w in fresh[: base.start]]
    start = base.start - len(promote)
    # Every process counts against the maximum, those on their way out included.
    processes = len(serving) + start + len(promote)
    room = max(0, limits.workers_max - processes)
    kept = [w.id for w in fresh[len(promote) :]][:room]
    stop.extend(w.id for w in standby if w.id not in promote and w.id not in kept)
    demote: list[str] = []
    start_standby = 0
    if limits.flashboot and not kept:
        idle_stops = [
            w
            for w in serving
            if w.id in stop
            and w.kind is WorkerKind.LOCAL
            and w.state is WorkerState.IDLE
            and w.version == limits.version
            and not w.recycle
        ]
        if idle_stops:
            demote = [idle_stops[0].id]
            stop.remove(demote[0])
        elif room >= 1:
            start_standby = 1
    return Decision(
        start=start, stop=stop, promote=promote, demote=demote, start_standby=start_standby
    )


def halt(workers: list[Worker]) -> Decision:
    """Stop every local worker not on its way out already, busy, starting, standby or
    without a process alike, and start none. External workers are not the server's to stop."""
    return Decision(
        stop=[
            w.id
            for w in workers
            if w.kind is WorkerKind.LOCAL and w.state is not WorkerState.STOPPING
        ]
    )


def serve(limits: Limits, load: Load, workers: list[Worker], now: float) -> Decision:
    """Start workers when the load asks for them (up to the maximum, counting those still
    on their way out), keep the minimum, stop idle and outdated ones.

    Only local workers are started or stopped; external ones count as capacity.
    """
    stop: list[str] = []
    counted = [w for w in workers if w.is_live or w.is_pending]
    for w in counted:
        outdated = w.version != limits.version or w.recycle
        if w.kind is WorkerKind.LOCAL and outdated and w.state is not WorkerState.RUNNING:
            stop.append(w.id)
    current = [w for w in counted if w.id not in stop]
    outgoing = sum(1 for w in current if w.version != limits.version or w.recycle)
    stopping = sum(1 for w in workers if w.state is WorkerState.STOPPING) + len(stop)

    target = _target(limits, load, current)
    wanted = max(limits.workers_min, min(limits.workers_max, target))
    start = max(0, wanted - (len(current) - outgoing))
    # Never past the maximum, not even for a moment: workers on their way out still hold a
    # process (and maybe a GPU) until they are gone.
    start = min(start, max(0, limits.workers_max - len(current) - stopping))

    if limits.scaler_type is ScalerType.REQUEST_COUNT:
        floor = wanted
    else:
        # While jobs wait, idle workers are about to take them: do not shrink.
        floor = max(limits.workers_min, len(current) if load.queued else 0)
    floor = min(floor, limits.workers_max)
    surplus = len(current) - floor
    if surplus > 0:
        over_max = len(current) > limits.workers_max
        pending = [w for w in current if w.kind is WorkerKind.LOCAL and w.is_pending]
        # Newest first: the one that has come least far on its way up goes first.
        starting = sorted(
            (
                w
                for w in current
                if w.kind is WorkerKind.LOCAL
                and w.state is WorkerState.INITIALIZING
                and (now - w.started_at >= limits.idle_timeout_s or over_max)
            ),
            key=lambda w: -w.started_at,
        )
        idle = sorted(
            (
                w
                for w in current
                if w.kind is WorkerKind.LOCAL
                and w.state is WorkerState.IDLE
                and w.idle_since is not None
                and (now - w.idle_since >= limits.idle_timeout_s or over_max)
            ),
            key=lambda w: w.idle_since or 0.0,
        )
        stop.extend(w.id for w in [*pending, *starting, *idle][:surplus])
    return Decision(start=start, stop=stop)


def overdue_starts(workers: list[Worker], now: float, start_timeout_s: float) -> list[Worker]:
    """Local workers started ``start_timeout_s`` or more ago that have not called in yet:
    still ``initializing``, or a standby never heard from."""
    return [
        w
        for w in workers
        if w.kind is WorkerKind.LOCAL
        and (
            w.state is WorkerState.INITIALIZING
            or (w.state is WorkerState.STANDBY and w.last_seen is None)
        )
        and now - w.started_at >= start_timeout_s
    ]
