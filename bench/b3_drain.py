"""B3: drain a queue of no-op jobs through 4 runpod-SDK workers.

All jobs are queued first on an endpoint with ``workersMax: 0`` (``POST /run``, 16
connections), then ``PATCH /v1/endpoints/{id}`` sets ``workersMin = workersMax = 4``. The
clock starts when the first job leaves the queue and stops when every job is completed;
both moments are seen by polling ``/health`` every 50 ms (the resolution of the figure). The
workers' start-up (PATCH to first take) is reported on its own row.

It runs twice, each time on a fresh server: first with the workers sharing CPU 0 with skiff
(like every other benchmark: the server under test and everything it starts on one core), then
with the workers moved to CPU 1 as soon as they appear (their processes re-pinned with
``sched_setaffinity`` before the SDK forks its heartbeat process, which inherits it), the way a
host with GPUs gives workers cores of their own; the load generator is idle during a drain, so
CPU 1 holds only the workers and the orchestrator's polling.

The reference has no queue (its ``/run`` keeps the job in a dict and nothing takes it), so
there is nothing comparable to drain: its column is n/a. Its nearest figure is B2's
``/runsync`` rate, where the handler runs inline.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

from bench import pinning, servers
from bench.common import skiff_load
from bench.load import run_load
from bench.results import BenchResult, Options, Row, summary

WORKERS = 4
POLL_S = 0.05


def run(opts: Options) -> BenchResult:
    jobs = opts.pick(10_000, 300)
    result = BenchResult("B3", f"drain {jobs} queued jobs through {WORKERS} workers")
    details: dict[str, Any] = {"jobs": jobs, "worker_concurrency": opts.worker_concurrency}
    for own_core in (False, True):
        where = f"workers on CPU {pinning.LOAD_CPU}" if own_core else "one core"
        if own_core and not pinning.enabled():
            continue
        with servers.skiff(opts.logs, "b3-own" if own_core else "b3", opts.scratch) as skiff:
            endpoint = skiff.create_endpoint(
                opts.worker_env(), workersMin=0, workersMax=0, idleTimeout=3600
            )
            opts.say(f"B3 ({where}): queueing {jobs} jobs")
            fill = run_load(skiff_load(skiff, "POST", [f"/v2/{endpoint}/run"], jobs, 16))
            result.add_errors("skiff", fill)
            queued = skiff.health(endpoint)["jobs"]["inQueue"]
            opts.say(f"B3 ({where}): {queued} queued; starting {WORKERS} workers")
            patched = time.time()
            skiff.update_endpoint(endpoint, workersMin=WORKERS, workersMax=WORKERS)
            if own_core:
                _move_workers(skiff, endpoint)
            watched = _watch(skiff, endpoint, queued, timeout_s=600)
        result.rows += _rows(watched, queued, patched, fill.rate, where, first=not own_core)
        failed = sum(watched.counts[k] for k in ("failed", "timedOut", "cancelled"))
        result.errors["skiff"] = result.errors.get("skiff", 0) + failed
        details[where] = {"queued": queued, "final_counts": watched.counts, "fill": summary(fill)}
    result.rows.append(result.error_row())
    result.details = details
    return result


def _rows(
    watched: _Drain, queued: int, patched: float, fill_rate: float, where: str, first: bool
) -> list[Row]:
    drain_s = max(1e-9, watched.done - watched.first)
    n = max(1, queued) / 1e6  # jobs, for CPU per job in µs
    rate = queued / drain_s
    rows = [
        Row(
            "B3",
            f"jobs/s, first take -> all {queued} completed ({where})",
            rate,
            "n/a: no queue (nearest: B2 /runsync)",
            ">= 2,000 jobs/s",
            rate >= 2000,
        ),
        Row("B3", f"drain time (s) ({where})", drain_s, "n/a", digits=2),
        Row(
            "B3",
            f"first take -> queue empty (s) ({where})",
            watched.emptied - watched.first,
            "n/a",
            digits=2,
        ),
        Row(
            "B3",
            f"CPU per job, skiff server process (µs) ({where})",
            watched.server_cpu_s / n,
            "n/a",
        ),
        Row("B3", f"CPU per job, SDK workers (µs) ({where})", watched.workers_cpu_s / n, "n/a"),
        Row(
            "B3",
            f"workers' start: PATCH -> first take (s), {WORKERS} workers ({where})",
            watched.first - patched,
            "n/a",
            digits=2,
        ),
    ]
    if first:
        rows.append(
            Row("B3", "queueing rate while filling, /run jobs/s (16 conns)", fill_rate, "n/a")
        )
    return rows


def _move_workers(skiff: servers.Skiff, endpoint: str) -> None:
    """Re-pin the endpoint's workers to the load CPU as soon as their processes exist."""
    moved: set[int] = set()
    deadline = time.monotonic() + 60
    while len(moved) < WORKERS and time.monotonic() < deadline:
        for worker in skiff.workers(endpoint):
            pid = worker.get("pid")
            if pid and int(pid) not in moved:
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(int(pid), {pinning.LOAD_CPU})
                moved.add(int(pid))
        time.sleep(0.01)
    if len(moved) < WORKERS:
        raise RuntimeError(f"only {len(moved)} of {WORKERS} workers started: {skiff.tail_log()}")
    # Anything the workers forked before they were moved (the SDK's heartbeat process comes
    # later, after its import) follows them.
    for pid in servers.token_pids(skiff.token):
        if pid != skiff.pid:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(pid, {pinning.LOAD_CPU})


@dataclass
class _Drain:
    first: float
    emptied: float
    done: float
    counts: dict[str, int]
    #: CPU seconds of skiff and of its workers from the first take to the end (the workers'
    #: start-up, importing the SDK, comes before and is not in it).
    server_cpu_s: float
    workers_cpu_s: float


def _watch(skiff: servers.Skiff, endpoint: str, queued: int, timeout_s: float) -> _Drain:
    """The moments of the first take, the queue empty and every job finished, each the time
    of the poll that first saw it."""
    first = emptied = 0.0
    cpu_at_first = (0.0, 0.0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = time.time()
        counts = skiff.health(endpoint)["jobs"]
        if not first and counts["inQueue"] < queued:
            first = seen
            cpu_at_first = skiff.cpu_seconds()
        if first and not emptied and counts["inQueue"] == 0:
            emptied = seen
        finished = counts["completed"] + counts["failed"] + counts["timedOut"]
        if finished + counts["cancelled"] >= queued:
            server, workers = skiff.cpu_seconds()
            return _Drain(
                first,
                emptied or seen,
                seen,
                counts,
                server - cpu_at_first[0],
                workers - cpu_at_first[1],
            )
        time.sleep(POLL_S)
    raise RuntimeError(f"the queue did not drain in {timeout_s} s: {skiff.tail_log()}")
