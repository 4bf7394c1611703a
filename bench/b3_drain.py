"""B3: drain a queue of no-op jobs through 4 runpod-SDK workers.

All jobs are queued first on an endpoint with ``workersMax: 0`` (``POST /run``, 16
connections), then ``PATCH /v1/endpoints/{id}`` sets ``workersMin = workersMax = 4``. The
clock starts when the first job leaves the queue and stops when every job is completed;
both moments are seen by polling ``/health`` every 50 ms (the resolution of the figure). The
workers' start-up (PATCH to first take) is reported on its own row.

The reference has no queue (its ``/run`` keeps the job in a dict and nothing takes it), so
there is nothing comparable to drain: its column is n/a. Its nearest figure is B2's
``/runsync`` rate, where the handler runs inline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench import servers
from bench.common import skiff_load
from bench.load import run_load
from bench.results import BenchResult, Options, Row, summary

WORKERS = 4
POLL_S = 0.05


def run(opts: Options) -> BenchResult:
    jobs = opts.pick(10_000, 300)
    result = BenchResult("B3", f"drain {jobs} queued jobs through {WORKERS} workers")
    with servers.skiff(opts.logs, "b3", opts.scratch) as skiff:
        endpoint = skiff.create_endpoint(
            opts.worker_env(), workersMin=0, workersMax=0, idleTimeout=3600
        )
        opts.say(f"B3: queueing {jobs} jobs")
        fill = run_load(skiff_load(skiff, "POST", [f"/v2/{endpoint}/run"], jobs, 16))
        result.add_errors("skiff", fill)
        queued = skiff.health(endpoint)["jobs"]["inQueue"]
        opts.say(f"B3: {queued} queued; starting {WORKERS} workers")
        patched = time.time()
        skiff.update_endpoint(endpoint, workersMin=WORKERS, workersMax=WORKERS)
        watched = _watch(skiff, endpoint, queued, timeout_s=600)
    first, emptied, done, counts = watched.first, watched.emptied, watched.done, watched.counts
    failed = counts["failed"] + counts["timedOut"] + counts["cancelled"]
    result.errors["skiff"] = result.errors.get("skiff", 0) + failed
    drain_s = max(1e-9, done - first)
    n = max(1, queued) / 1e6  # jobs, for CPU per job in µs
    rate = queued / drain_s
    result.rows += [
        Row(
            "B3",
            f"jobs/s, first take -> all {queued} completed",
            rate,
            "n/a: no queue (nearest: B2 /runsync)",
            ">= 2,000 jobs/s",
            rate >= 2000,
        ),
        Row("B3", "drain time (s)", drain_s, "n/a", digits=2),
        Row("B3", "first take -> queue empty (s)", emptied - first, "n/a", digits=2),
        Row("B3", "CPU per job, skiff server process (µs)", watched.server_cpu_s / n, "n/a"),
        Row("B3", "CPU per job, SDK workers (µs)", watched.workers_cpu_s / n, "n/a"),
        Row(
            "B3",
            f"workers' start: PATCH -> first take (s), {WORKERS} workers",
            first - patched,
            "n/a",
            digits=2,
        ),
        Row("B3", "queueing rate while filling, /run jobs/s (16 conns)", fill.rate, "n/a"),
    ]
    result.rows.append(result.error_row())
    result.details = {
        "jobs": jobs,
        "queued": queued,
        "final_counts": counts,
        "worker_concurrency": opts.worker_concurrency,
        "fill": summary(fill),
    }
    return result


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
