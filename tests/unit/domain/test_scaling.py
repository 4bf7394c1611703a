"""The scaler's decision, as tables of situations."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from skiff.domain.endpoints import ScalerType
from skiff.domain.scaling import Decision, Limits, Load, decide, overdue_starts
from skiff.domain.workers import Worker, WorkerKind, WorkerState

NOW = 10_000.0
VERSION = 2


def worker(
    wid: str,
    state: WorkerState = WorkerState.IDLE,
    *,
    idle_for: float | None = None,
    version: int = VERSION,
    kind: WorkerKind = WorkerKind.LOCAL,
    recycle: bool = False,
    started_for: float = 3600,
) -> Worker:
    idle_since = None
    if state is WorkerState.IDLE:
        idle_since = NOW - (idle_for if idle_for is not None else 0.0)
    return Worker(
        id=wid,
        endpoint_id="ep-1",
        kind=kind,
        state=state,
        version=version,
        started_at=NOW - started_for,
        last_seen=NOW,
        idle_since=idle_since,
        recycle=recycle,
    )


@dataclass(frozen=True)
class Case:
    id: str
    workers: list[Worker]
    queued: int = 0
    in_progress: int = 0
    workers_min: int = 0
    workers_max: int = 3
    idle_timeout_s: float = 5.0
    start: int = 0
    stop: list[str] = field(default_factory=list)
    # One worker per job unless a case says otherwise: the clearest way to read a table.
    scaler_type: ScalerType = ScalerType.REQUEST_COUNT
    scaler_value: int = 1
    oldest_wait_s: float = 0.0


CASES = [
    Case("nothing-queued-min-0-starts-none", workers=[]),
    Case("queue-below-max-starts-one-per-job", workers=[], queued=2, start=2),
    Case("queue-above-max-starts-max", workers=[], queued=5, start=3),
    Case("min-2-without-load-starts-2", workers=[], workers_min=2, start=2),
    Case("min-above-load-wins", workers=[], queued=1, workers_min=2, start=2),
    Case("in-progress-counts-as-load", workers=[], in_progress=2, queued=2, start=3),
    Case(
        "initializing-workers-are-not-started-twice",
        workers=[worker("w1", WorkerState.INITIALIZING), worker("w2", WorkerState.INITIALIZING)],
        queued=2,
        start=0,
    ),
    Case(
        "initializing-workers-cap-further-starts",
        workers=[worker("w1", WorkerState.INITIALIZING), worker("w2", WorkerState.INITIALIZING)],
        queued=5,
        start=1,
    ),
    Case(
        "busy-workers-at-max-start-none",
        workers=[worker(f"w{i}", WorkerState.RUNNING) for i in range(3)],
        queued=10,
        in_progress=3,
        start=0,
    ),
    Case(
        "idle-past-timeout-above-min-is-stopped",
        workers=[worker("w1", idle_for=6)],
        stop=["w1"],
    ),
    Case(
        "idle-exactly-at-timeout-is-stopped",
        workers=[worker("w1", idle_for=5)],
        stop=["w1"],
    ),
    Case(
        "idle-past-timeout-at-min-is-kept",
        workers=[worker("w1", idle_for=600)],
        workers_min=1,
    ),
    Case(
        "only-the-surplus-above-min-is-stopped-oldest-idle-first",
        workers=[worker("w1", idle_for=10), worker("w2", idle_for=60), worker("w3", idle_for=30)],
        workers_min=1,
        stop=["w2", "w3"],
    ),
    Case(
        "idle-not-yet-past-timeout-is-kept",
        workers=[worker("w1", idle_for=4.9)],
    ),
    Case(
        "running-worker-is-never-stopped",
        workers=[worker("w1", WorkerState.RUNNING)],
    ),
    Case(
        "running-worker-is-kept-while-idle-one-goes",
        workers=[worker("w1", WorkerState.RUNNING), worker("w2", idle_for=100)],
        in_progress=1,
        stop=["w2"],
    ),
    Case(
        "initializing-worker-started-within-the-idle-timeout-is-kept-without-load",
        workers=[worker("w1", WorkerState.INITIALIZING, started_for=4)],
    ),
    Case(
        "initializing-worker-started-longer-than-the-idle-timeout-ago-stops-without-load",
        workers=[worker("w1", WorkerState.INITIALIZING, started_for=6)],
        stop=["w1"],
    ),
    Case(
        "initializing-workers-over-max-stop-at-once",
        workers=[worker(f"w{i}", WorkerState.INITIALIZING, started_for=1) for i in range(3)],
        workers_min=0,
        workers_max=0,
        stop=["w0", "w1", "w2"],
    ),
    Case(
        "initializing-workers-at-min-are-kept",
        workers=[worker(f"w{i}", WorkerState.INITIALIZING) for i in range(2)],
        workers_min=2,
    ),
    Case(
        "initializing-worker-stops-before-an-idle-one-newest-first",
        workers=[
            worker("old", WorkerState.INITIALIZING, started_for=60),
            worker("new", WorkerState.INITIALIZING, started_for=30),
            worker("i1", idle_for=60),
        ],
        workers_min=1,
        stop=["new", "old"],
    ),
    Case(
        "idle-worker-is-kept-while-jobs-wait",
        workers=[worker("w1", idle_for=600)],
        queued=1,
    ),
    Case(
        "outdated-idle-worker-is-stopped-and-replaced",
        workers=[worker("w1", idle_for=0, version=VERSION - 1)],
        workers_min=1,
        start=1,
        stop=["w1"],
    ),
    Case(
        "outdated-idle-worker-is-stopped-without-replacement-when-not-needed",
        workers=[worker("w1", idle_for=0, version=VERSION - 1)],
        stop=["w1"],
    ),
    Case(
        "outdated-running-worker-finishes-its-job",
        workers=[worker("w1", WorkerState.RUNNING, version=VERSION - 1)],
        in_progress=1,
        start=1,
    ),
    Case(
        "outdated-initializing-worker-is-stopped",
        workers=[worker("w1", WorkerState.INITIALIZING, version=VERSION - 1)],
        queued=1,
        start=1,
        stop=["w1"],
    ),
    Case(
        "recycle-flagged-idle-worker-is-stopped-and-replaced",
        workers=[worker("w1", idle_for=0, recycle=True)],
        queued=1,
        start=1,
        stop=["w1"],
    ),
    Case(
        "recycle-flagged-running-worker-is-kept",
        workers=[worker("w1", WorkerState.RUNNING, recycle=True)],
        in_progress=1,
        workers_max=1,
    ),
    Case(
        "stopping-workers-count-against-max",
        workers=[worker("s1", WorkerState.STOPPING), worker("s2", WorkerState.STOPPING)],
        queued=5,
        start=1,
    ),
    Case(
        "stopping-workers-at-max-block-every-start",
        workers=[worker(f"s{i}", WorkerState.STOPPING) for i in range(3)],
        queued=5,
        start=0,
    ),
    Case(
        "external-worker-counts-as-capacity",
        workers=[worker("x1", kind=WorkerKind.EXTERNAL)],
        queued=1,
        start=0,
    ),
    Case(
        "external-idle-worker-past-timeout-is-never-stopped",
        workers=[worker("x1", idle_for=3600, kind=WorkerKind.EXTERNAL)],
    ),
    Case(
        "external-outdated-worker-is-never-stopped",
        workers=[worker("x1", idle_for=3600, version=VERSION - 1, kind=WorkerKind.EXTERNAL)],
    ),
    Case(
        "throttled-and-unhealthy-workers-count-as-wanted-workers",
        workers=[worker("u1", WorkerState.UNHEALTHY), worker("t1", WorkerState.THROTTLED)],
        queued=2,
        start=0,
    ),
    Case(
        "waiting-for-a-gpu-never-asks-for-more-than-max",
        workers=[worker(f"t{i}", WorkerState.THROTTLED) for i in range(3)],
        queued=10,
        start=0,
    ),
    Case(
        "pending-workers-go-first-when-there-are-too-many",
        workers=[worker("t1", WorkerState.THROTTLED), worker("w1", idle_for=60)],
        stop=["t1", "w1"],
    ),
    # -- REQUEST_COUNT with a larger scalerValue --
    Case(
        "request-count-aims-at-ceil-of-load-over-value",
        workers=[],
        queued=5,
        in_progress=0,
        workers_max=10,
        scaler_value=4,
        start=2,
    ),
    Case(
        "request-count-counts-running-jobs-too",
        workers=[worker("w1", WorkerState.RUNNING), worker("w2", WorkerState.RUNNING)],
        queued=7,
        in_progress=2,
        workers_max=10,
        scaler_value=3,
        start=1,
    ),
    Case(
        "request-count-stops-idle-workers-beyond-its-aim",
        workers=[worker("w1", WorkerState.RUNNING), worker("w2", idle_for=60)],
        in_progress=1,
        scaler_value=4,
        stop=["w2"],
    ),
    # -- QUEUE_DELAY --
    Case(
        "queue-delay-starts-one-at-once-from-zero",
        workers=[],
        queued=5,
        scaler_type=ScalerType.QUEUE_DELAY,
        scaler_value=4,
        start=1,
    ),
    Case(
        "queue-delay-adds-a-worker-when-the-oldest-job-waited-too-long",
        workers=[worker("w1", WorkerState.RUNNING)],
        queued=3,
        in_progress=1,
        oldest_wait_s=4.5,
        scaler_type=ScalerType.QUEUE_DELAY,
        scaler_value=4,
        start=1,
    ),
    Case(
        "queue-delay-holds-while-jobs-wait-less-than-the-delay",
        workers=[worker("w1", WorkerState.RUNNING)],
        queued=3,
        in_progress=1,
        oldest_wait_s=3.9,
        scaler_type=ScalerType.QUEUE_DELAY,
        scaler_value=4,
        start=0,
    ),
    Case(
        "queue-delay-adds-one-at-a-time-while-one-is-starting",
        workers=[worker("w1", WorkerState.RUNNING), worker("w2", WorkerState.INITIALIZING)],
        queued=3,
        in_progress=1,
        oldest_wait_s=30,
        scaler_type=ScalerType.QUEUE_DELAY,
        scaler_value=4,
        start=0,
    ),
    Case(
        "queue-delay-never-past-max",
        workers=[worker(f"w{i}", WorkerState.RUNNING) for i in range(3)],
        queued=3,
        in_progress=3,
        oldest_wait_s=30,
        scaler_type=ScalerType.QUEUE_DELAY,
        start=0,
    ),
    Case(
        "queue-delay-stops-idle-workers-after-the-timeout-when-nothing-waits",
        workers=[worker("w1", idle_for=6), worker("w2", idle_for=1)],
        scaler_type=ScalerType.QUEUE_DELAY,
        stop=["w1"],
    ),
    Case(
        "queue-delay-keeps-idle-workers-while-jobs-wait",
        workers=[worker("w1", idle_for=60)],
        queued=1,
        scaler_type=ScalerType.QUEUE_DELAY,
        stop=[],
    ),
    Case(
        "over-max-idle-workers-stop-before-timeout",
        workers=[worker("w1", idle_for=1), worker("w2", idle_for=2), worker("w3", idle_for=3)],
        workers_max=1,
        queued=0,
        stop=["w3", "w2", "w1"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case) -> None:
    decision = decide(
        Limits(
            workers_min=case.workers_min,
            workers_max=case.workers_max,
            idle_timeout_s=case.idle_timeout_s,
            version=VERSION,
            scaler_type=case.scaler_type,
            scaler_value=case.scaler_value,
        ),
        Load(queued=case.queued, in_progress=case.in_progress, oldest_wait_s=case.oldest_wait_s),
        case.workers,
        NOW,
    )
    assert decision.start == case.start
    assert decision.stop == case.stop


@pytest.mark.parametrize("queued", [0, 1, 3, 50], ids=lambda q: f"queued-{q}")
@pytest.mark.parametrize("live", [0, 1, 3], ids=lambda n: f"live-{n}")
def test_decide_never_exceeds_workers_max(queued: int, live: int) -> None:
    workers = [worker(f"w{i}", WorkerState.RUNNING) for i in range(live)]
    for scaler in ScalerType:
        decision = decide(
            Limits(0, 3, 5.0, VERSION, scaler, 1), Load(queued, live, 60.0), workers, NOW
        )
        assert live + decision.start - len(decision.stop) <= 3
        assert decision.start >= 0
    decision = decide(Limits(0, 3, 5.0, VERSION), Load(queued, live), workers, NOW)
    assert live + decision.start - len(decision.stop) <= 3
    assert decision.start >= 0


# -- flashboot: one standby worker, started but held back ------------------------------------


def flash(
    workers: list[Worker], queued: int = 0, workers_max: int = 3, flashboot: bool = True
) -> Decision:
    return decide(
        Limits(0, workers_max, 5.0, VERSION, ScalerType.REQUEST_COUNT, 1, flashboot=flashboot),
        Load(queued, sum(w.state is WorkerState.RUNNING for w in workers)),
        workers,
        NOW,
    )


def test_flashboot_keeps_one_standby_ready_while_nothing_runs() -> None:
    assert flash([]) == Decision(start_standby=1)
    assert flash([worker("s", WorkerState.STANDBY)]) == Decision()


def test_a_scale_up_promotes_the_standby_instead_of_starting_a_process() -> None:
    decision = flash([worker("s", WorkerState.STANDBY)], queued=1)
    assert decision.promote == ["s"] and decision.start == 0
    # Room is left under the maximum, so a new standby starts behind it.
    assert decision.start_standby == 1


def test_a_scale_up_beyond_the_standby_starts_the_rest() -> None:
    decision = flash([worker("s", WorkerState.STANDBY)], queued=3)
    assert decision.promote == ["s"] and decision.start == 2
    assert decision.start_standby == 0  # three serving: no room for another


def test_the_standby_counts_against_the_maximum() -> None:
    busy = [worker("r1", WorkerState.RUNNING), worker("r2", WorkerState.RUNNING)]
    decision = flash([*busy, worker("s", WorkerState.STANDBY)], queued=2, workers_max=3)
    assert decision.promote == ["s"] and decision.start == 0
    assert flash(busy, workers_max=2).start_standby == 0
    full = flash([*busy, worker("s", WorkerState.STANDBY)], workers_max=2)
    assert full.stop == ["s"]


def test_an_idle_worker_past_its_timeout_becomes_the_standby_instead_of_stopping() -> None:
    decision = flash([worker("i", WorkerState.IDLE, idle_for=60)])
    assert decision.demote == ["i"] and decision.stop == [] and decision.start_standby == 0
    with_standby = flash(
        [worker("i", WorkerState.IDLE, idle_for=60), worker("s", WorkerState.STANDBY)]
    )
    assert with_standby.stop == ["i"] and with_standby.demote == []


def test_standbys_of_an_old_version_or_without_flashboot_are_stopped() -> None:
    old = worker("old", WorkerState.STANDBY, version=VERSION - 1)
    assert flash([old]).stop == ["old"]
    assert flash([worker("s", WorkerState.STANDBY)], flashboot=False).stop == ["s"]
    assert flash([], flashboot=False) == Decision()


# -- the start-up deadline ------------------------------------------------------------------


def test_a_worker_that_never_called_in_is_overdue_once_the_start_timeout_has_passed() -> None:
    hung = worker("hung", WorkerState.INITIALIZING, started_for=600)
    fresh = worker("fresh", WorkerState.INITIALIZING, started_for=599)
    assert overdue_starts([hung, fresh], NOW, 600) == [hung]


def test_workers_that_called_in_or_are_not_local_are_never_overdue() -> None:
    up = worker("up", WorkerState.IDLE, idle_for=0, started_for=3600)
    busy = worker("busy", WorkerState.RUNNING, started_for=3600)
    external = worker("x", WorkerState.INITIALIZING, kind=WorkerKind.EXTERNAL)
    waiting = worker("t", WorkerState.THROTTLED, started_for=3600)
    assert overdue_starts([up, busy, external, waiting], NOW, 600) == []


def test_a_standby_never_heard_from_is_overdue_and_one_heard_from_is_not() -> None:
    silent = worker("silent", WorkerState.STANDBY, started_for=700)
    silent.last_seen = None
    heard = worker("heard", WorkerState.STANDBY, started_for=700)
    assert overdue_starts([silent, heard], NOW, 600) == [silent]


# -- a disabled owner ----------------------------------------------------------------------


def test_a_disabled_owners_endpoint_stops_every_local_worker_busy_ones_too_starts_none() -> None:
    """Their workers' calls are refused (401), so a busy one could finish nothing: every local
    worker goes, whatever ``workersMin`` and the queue ask for; external ones are not ours."""
    workers = [
        worker("busy", WorkerState.RUNNING),
        worker("idle", WorkerState.IDLE),
        worker("starting", WorkerState.INITIALIZING, started_for=1),
        worker("standby", WorkerState.STANDBY),
        worker("throttled", WorkerState.THROTTLED),
        worker("leaving", WorkerState.STOPPING),
        worker("outside", WorkerState.IDLE, kind=WorkerKind.EXTERNAL),
    ]
    limits = Limits(2, 3, 5.0, VERSION, flashboot=True, owner_disabled=True)
    decision = decide(limits, Load(queued=5, in_progress=1, oldest_wait_s=60), workers, NOW)
    assert decision == Decision(stop=["busy", "idle", "starting", "standby", "throttled"])
    assert decide(limits, Load(queued=5, in_progress=0), [], NOW) == Decision()
