"""B2: ``POST /runsync`` with the no-op handler on warm runpod-SDK workers.

skiff: an endpoint with ``workersMin = workersMax = 4`` local workers (separate processes,
pinned with the server), measured once ``/health`` shows all four idle. Each request queues a
job that a worker takes over its job-take long-poll, runs and reports with job-done, and the
runsync answer follows. Reference: the SDK's ``/runsync``, which runs the handler inline in the
server process. At 4 and at 16 concurrent connections: 4 is one request per worker, 16 keeps
every worker busy.

The workers run with ``BENCH_CONCURRENCY`` jobs at once (see ``handler.py``): above any
number of jobs in flight here, so the SDK's one-second pause when a worker is full never
triggers. What remains of the SDK's own polling is a 100 ms tick in ``rp_scale.run_jobs``
(a taken job waits for it when the worker had nothing to run); it is measured below as the
time a job spends at the worker (``startedAt`` -> ``finishedAt`` from ``/requests``).
"""

from __future__ import annotations

import datetime as dt
import statistics

from bench import servers
from bench.common import reference_load, skiff_load
from bench.load import run_load
from bench.results import BenchResult, Options, Row, summary

WORKERS = 4
LEVELS = (4, 16)


def run(opts: Options) -> BenchResult:
    requests = opts.pick(3_000, 150)
    warmup = opts.pick(200, 20)
    result = BenchResult(
        "B2", f"POST /runsync, {WORKERS} warm workers, {requests} requests per concurrency"
    )
    mine, theirs, at_worker = {}, {}, {}
    with servers.skiff(opts.logs, "b2", opts.scratch) as skiff:
        endpoint = skiff.create_endpoint(
            opts.worker_env(), workersMin=WORKERS, workersMax=WORKERS, idleTimeout=3600
        )
        skiff.wait_for(
            f"{WORKERS} idle workers",
            lambda: skiff.health(endpoint)["workers"]["idle"] == WORKERS,
            timeout_s=120,
        )
        for level in LEVELS:
            opts.say(f"B2: skiff /runsync x {requests} at {level} connections")
            path = f"/v2/{endpoint}/runsync"
            spec = skiff_load(skiff, "POST", [path], requests + warmup, level, warmup=warmup)
            mine[level] = run_load(spec, server_cpu=skiff.cpu_seconds)
            at_worker[level] = time_at_worker(skiff, endpoint)
    with servers.reference(opts.logs, "b2", opts.sdk_log_level) as ref:
        for level in LEVELS:
            opts.say(f"B2: reference /runsync x {requests} at {level} connections")
            spec = reference_load(
                ref, "POST", ["/runsync"], requests + warmup, level, warmup=warmup
            )
            theirs[level] = run_load(spec, server_cpu=ref.cpu_seconds)
    for level in LEVELS:
        a, b = mine[level], theirs[level]
        result.add_errors("skiff", a)
        result.add_errors("reference", b)
        ratio = a.rate / b.rate if b.rate else 0.0
        result.rows += [
            Row(
                "B2",
                f"jobs/s, {level} conns",
                a.rate,
                b.rate,
                ">= 1.0x reference",
                ratio >= 1,
                key=f"rate_{level}",
            ),
            Row(
                "B2",
                f"p50 latency (ms), {level} conns",
                a.p50_ms,
                b.p50_ms,
                "<= 2 ms",
                a.p50_ms <= 2,
                digits=2,
                key=f"p50_{level}",
            ),
            Row("B2", f"p99 latency (ms), {level} conns", a.p99_ms, b.p99_ms, digits=2),
            Row(
                "B2",
                f"p50 time at the worker, take -> result (ms), {level} conns",
                at_worker[level],
                "n/a (inline)",
                digits=1,
            ),
            Row(
                "B2",
                f"CPU per job, server process (µs), {level} conns",
                a.server_cpu_us,
                b.server_cpu_us,
            ),
            Row(
                "B2",
                f"CPU per job, SDK workers (µs), {level} conns",
                a.workers_cpu_us,
                "n/a (inline)",
            ),
        ]
        result.latencies[f"B2 POST /runsync ({level} conns)"] = {
            "skiff": a.latencies_ms,
            "reference": b.latencies_ms,
        }
    result.rows.append(result.error_row())
    result.details = {
        "worker_concurrency": opts.worker_concurrency,
        "skiff": {str(k): summary(v) for k, v in mine.items()},
        "reference": {str(k): summary(v) for k, v in theirs.items()},
    }
    return result


def time_at_worker(skiff: servers.Skiff, endpoint: str) -> float:
    """Median ``finishedAt - startedAt`` (ms) of the latest jobs: from the worker's take to
    its result, so the worker's own share of the latency (the SDK's tick included)."""
    page = skiff.http.get(f"/v2/{endpoint}/requests", params={"limit": 200}).json()
    spans = [
        (_ts(job["finishedAt"]) - _ts(job["startedAt"])) * 1000
        for job in page["requests"]
        if job.get("startedAt") and job.get("finishedAt")
    ]
    return statistics.median(spans) if spans else float("nan")


def _ts(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
