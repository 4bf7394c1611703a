"""B1: ``POST /run`` throughput and latency on an empty queue.

skiff: ``/v2/{endpoint}/run`` on an endpoint with ``workersMax: 0``, so no worker consumes
and every job stays queued; each answer comes after the job is durable in the store (skiff's
design). Reference: ``/run`` of the SDK's test server, which keeps the job in memory only.
16 keep-alive connections, the same body, the first requests a warm-up not recorded.

The reference slows down as jobs pile up in it: every ``/run`` adds the job to the SDK's
``JobsProgress`` set and then rebuilds the comma-joined list of *every* stored id for the
heartbeat process (``worker_state.JobsProgress.add`` -> ``_notify_mirror``), and past 64 KB of
ids it also logs a warning per call. So its rate over the same N requests as skiff falls with
N (quadratic total work). The goal is judged against its best case instead: fresh processes,
each measured over its first ``BEST_REQUESTS`` jobs (median of a few); the same-N figure is
shown on its own row.
"""

from __future__ import annotations

import statistics

from bench import servers
from bench.common import reference_load, skiff_load
from bench.load import LoadResult, run_load
from bench.results import BenchResult, Options, Row, summary

CONNECTIONS = 16
#: Jobs in one best-case measurement of the reference (after a 100-job warm-up).
BEST_REQUESTS = 1_000
BEST_WARMUP = 100


def run(opts: Options) -> BenchResult:
    requests = opts.pick(20_000, 500)
    warmup = opts.pick(1_000, 100)
    repeats = opts.pick(5, 1)
    result = BenchResult("B1", f"POST /run, {CONNECTIONS} connections, {requests} requests")
    with servers.skiff(opts.logs, "b1", opts.scratch) as skiff:
        endpoint = skiff.create_endpoint({}, workersMin=0, workersMax=0)
        opts.say(f"B1: skiff /run x {requests}")
        spec = skiff_load(
            skiff, "POST", [f"/v2/{endpoint}/run"], requests + warmup, CONNECTIONS, warmup=warmup
        )
        mine = run_load(spec, server_cpu=skiff.cpu_seconds)
    with servers.reference(opts.logs, "b1", opts.sdk_log_level) as ref:
        opts.say(f"B1: reference /run x {requests}")
        spec = reference_load(ref, "POST", ["/run"], requests + warmup, CONNECTIONS, warmup=warmup)
        same_n = run_load(spec, server_cpu=ref.cpu_seconds)
    best_runs = []
    for repeat in range(repeats):
        with servers.reference(opts.logs, f"b1-best{repeat}", opts.sdk_log_level) as ref:
            opts.say(f"B1: reference /run, fresh process, x {BEST_REQUESTS} ({repeat + 1})")
            spec = reference_load(
                ref, "POST", ["/run"], BEST_REQUESTS + BEST_WARMUP, CONNECTIONS, warmup=BEST_WARMUP
            )
            best_runs.append(run_load(spec, server_cpu=ref.cpu_seconds))
    best = sorted(best_runs, key=lambda r: r.rate)[len(best_runs) // 2]
    for side, load in [
        ("skiff", mine),
        ("reference", same_n),
        *(("reference", b) for b in best_runs),
    ]:
        result.add_errors(side, load)
    result.rows += rows(result.id, mine, best, same_n, requests)
    result.rows.append(result.error_row())
    result.latencies["B1 POST /run (16 conns)"] = {
        "skiff": mine.latencies_ms,
        f"reference, best case (first {BEST_REQUESTS:,} jobs)": best.latencies_ms,
        f"reference, same {requests:,} requests": same_n.latencies_ms,
    }
    result.details = {
        "skiff": summary(mine),
        "reference_best": summary(best),
        "reference_best_rates": [round(r.rate, 1) for r in best_runs],
        "reference_same_n": summary(same_n),
        "reference_best_rate_spread": round(statistics.pstdev(r.rate for r in best_runs), 1),
    }
    return result


def rows(
    bench: str, mine: LoadResult, best: LoadResult, same_n: LoadResult, requests: int
) -> list[Row]:
    ratio = mine.rate / best.rate if best.rate else 0.0
    return [
        Row(
            bench,
            f"jobs/s (reference: best case, first {BEST_REQUESTS:,} jobs of a fresh process)",
            mine.rate,
            best.rate,
            ">= 5x reference",
            ratio >= 5,
            key="rate",
        ),
        Row(bench, f"jobs/s, both over the same {requests:,} requests", mine.rate, same_n.rate),
        Row(bench, "p50 latency (ms) (reference: best case)", mine.p50_ms, best.p50_ms, digits=2),
        Row(bench, "p99 latency (ms) (reference: best case)", mine.p99_ms, best.p99_ms, digits=2),
        Row(
            bench,
            f"p99 latency (ms), both over the same {requests:,} requests",
            mine.p99_ms,
            same_n.p99_ms,
            digits=2,
        ),
        Row(
            bench,
            "server CPU per request (µs) (reference: best case)",
            mine.server_cpu_us,
            best.server_cpu_us,
        ),
    ]
