"""B6: default workers: runpod-SDK workers at the SDK's default concurrency of one job (no
``concurrency_modifier``, no ``BENCH_CONCURRENCY``), as most users write them (issue 15).

The SDK's job loop (``rp_scale.get_jobs``) sleeps a whole second whenever its worker holds as
many jobs as its concurrency, so a default worker asks for work at most once a second: it takes
a job, finds itself full, sleeps, and only at the first one-second tick after the job ended
does it ask again. B6 measures what that costs, in three parts, on one skiff server:

1. The B2 load (``/runsync`` at 4 and 16 connections) on an endpoint of 2 warm default workers.
   Its rate and p50 at 16 connections are set against B2's own (4 workers that hold 1,024 jobs
   each) by ``__main__.cross_rows`` when B2 ran in the same run.
2. A handler that sleeps 2 s (``"sleep"`` in the job's input, see ``handler.py``) on one
   default worker, with a queue of jobs submitted at once with ``/run``: how long the worker
   sat idle between jobs, from the handler's own start and end times (its output) and, as a
   cross-check of what skiff reports, from the jobs' ``startedAt``/``finishedAt`` in
   ``/requests``.
3. A sequential client (one ``/runsync`` after another) on one warm default worker, and the
   same on one worker whose ``concurrency_modifier`` returns 2, then 8 (``BENCH_CONCURRENCY``):
   what the advice to latency-sensitive users (docs/workers.md) buys. 2 is not enough: the SDK
   counts a job it has just taken twice (in its queue and in progress) until its loop starts it,
   so one job fills a worker of 2 and it sleeps its second like a default worker. From 5 up the
   worker always has room to ask for two or more jobs at once, the take for which skiff hands it
   the next job the moment the last one ends (docs/workers.md, "Workers that take several
   jobs"). The reference answers the same client with the handler inline.

4. A backlog: ``BACKLOG`` jobs of ``BACKLOG_SLEEP_S`` queued at once with ``/run`` on a new
   endpoint of 2 default workers, warm but with no execution history yet (a fresh endpoint):
   how long from the first submission until the last job completed, against the ideal (every
   job back to back on both workers, nothing between them). The loss is the SDK's one-second
   tick, paid whenever a worker's line-up runs dry before it asks again (services/lineup.py).

The reference has no workers: parts 1, 2 and 4 are n/a there (B2 has its inline ``/runsync``).
"""

from __future__ import annotations

import datetime as dt
import itertools
import statistics
import time
from dataclasses import dataclass
from typing import Any

from bench import servers
from bench.common import reference_load, skiff_load
from bench.load import LoadResult, run_load
from bench.results import BenchResult, Options, Row, summary

WORKERS = 2
LEVELS = (4, 16)
#: The handler's sleep in part 2, seconds: a short GPU job.
SLEEP_S = 2.0
#: How often part 2 looks whether its queue has finished.
POLL_S = 0.25
#: The ``concurrency_modifier`` values part 3 measures besides the default: one too small to
#: help and docs/workers.md's advice.
ADVISED = (2, 8)
#: Part 4: a backlog of short jobs on two default workers.
BACKLOG = 160
BACKLOG_SLEEP_S = 0.1
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}


def run(opts: Options) -> BenchResult:
    requests = opts.pick(40, 6)
    warmup = opts.pick(4, 1)
    queued = opts.pick(20, 3)
    sequential = opts.pick(30, 3)
    backlog = opts.pick(BACKLOG, 20)
    result = BenchResult(
        "B6",
        f"default workers (concurrency 1): /runsync x {requests} on {WORKERS} workers, "
        f"{queued} queued {SLEEP_S:g} s jobs on 1, {sequential} sequential /runsync",
    )
    default_env = opts.worker_env()
    del default_env["BENCH_CONCURRENCY"]
    loads: dict[int, LoadResult] = {}
    with servers.skiff(opts.logs, "b6", opts.scratch) as skiff:
        endpoint = _warm_endpoint(skiff, default_env, WORKERS)
        for level in LEVELS:
            opts.say(f"B6: /runsync x {requests} at {level} connections, {WORKERS} default workers")
            path = f"/v2/{endpoint}/runsync"
            spec = skiff_load(skiff, "POST", [path], requests + warmup, level, warmup=warmup)
            loads[level] = run_load(spec, server_cpu=skiff.cpu_seconds)
        # One of the two goes: the other is warm already, sparing a worker's start.
        skiff.update_endpoint(endpoint, workersMin=1, workersMax=1)
        skiff.wait_for("one worker left", lambda: len(skiff.workers(endpoint)) == 1, timeout_s=60)
        single = endpoint
        opts.say(f"B6: sequential /runsync x {sequential}, 1 default worker")
        chain = {"default": _sequential(skiff, single, sequential, warmup)}
        opts.say(f"B6: {queued} jobs of {SLEEP_S:g} s queued on 1 default worker")
        idle = _queue_of_sleepers(skiff, single, queued)
        skiff.delete_endpoint(single)

        for concurrency in ADVISED:
            env = opts.worker_env() | {"BENCH_CONCURRENCY": str(concurrency)}
            advised = _warm_endpoint(skiff, env, 1)
            opts.say(
                f"B6: sequential /runsync x {sequential}, 1 worker at concurrency {concurrency}"
            )
            chain[f"concurrency {concurrency}"] = _sequential(skiff, advised, sequential, warmup)
            skiff.delete_endpoint(advised)

        fresh = _warm_endpoint(skiff, default_env, WORKERS)
        opts.say(f"B6: {backlog} jobs of {BACKLOG_SLEEP_S:g} s queued on {WORKERS} default workers")
        drain = _backlog(skiff, fresh, backlog)
        skiff.delete_endpoint(fresh)
    with servers.reference(opts.logs, "b6", opts.sdk_log_level) as ref:
        opts.say(f"B6: reference sequential /runsync x {sequential}")
        spec = reference_load(ref, "POST", ["/runsync"], sequential + warmup, 1, warmup=warmup)
        inline = run_load(spec, server_cpu=ref.cpu_seconds)

    for load in (*loads.values(), *chain.values()):
        result.add_errors("skiff", load)
    result.add_errors("reference", inline)
    result.errors["skiff"] += idle.failed + drain.failed
    result.rows += _load_rows(loads)
    result.rows += _idle_rows(idle, queued)
    result.rows += _drain_rows(drain, backlog)
    for name, load in chain.items():
        where = "1 default worker" if name == "default" else f"1 worker, {name}"
        result.rows += _sequential_rows(where, load, inline)
    result.rows.append(result.error_row())
    for level, load in loads.items():
        result.latencies[f"B6 POST /runsync, {WORKERS} default workers ({level} conns)"] = {
            "skiff": load.latencies_ms
        }
    result.latencies["B6 sequential POST /runsync, 1 worker"] = {
        **{f"skiff, {name}": load.latencies_ms for name, load in chain.items()},
        "reference (inline)": inline.latencies_ms,
    }
    result.details = {
        "default_workers": {str(k): summary(v) for k, v in loads.items()},
        "sequential": {name: summary(load) for name, load in chain.items()},
        "sequential_reference": summary(inline),
        "queue_of_sleepers": {
            "jobs": queued,
            "sleep_s": SLEEP_S,
            "gaps_ms_handler": [round(g * 1000, 1) for g in idle.gaps],
            "gaps_ms_skiff": [round(g * 1000, 1) for g in idle.skiff_gaps],
        },
        "backlog": {
            "jobs": backlog,
            "sleep_s": BACKLOG_SLEEP_S,
            "workers": WORKERS,
            "drain_s": drain.seconds,
            "ideal_s": drain.ideal,
        },
    }
    return result


def _warm_endpoint(skiff: servers.Skiff, env: dict[str, str], workers: int) -> str:
    """An endpoint of ``workers`` started workers, once each polls for work."""
    endpoint = skiff.create_endpoint(env, workersMin=workers, workersMax=workers, idleTimeout=3600)
    skiff.wait_for(
        f"{workers} idle workers",
        lambda: skiff.health(endpoint)["workers"]["idle"] == workers,
        timeout_s=120,
    )
    return endpoint


def _sequential(skiff: servers.Skiff, endpoint: str, requests: int, warmup: int) -> LoadResult:
    path = f"/v2/{endpoint}/runsync"
    spec = skiff_load(skiff, "POST", [path], requests + warmup, 1, warmup=warmup)
    return run_load(spec, server_cpu=skiff.cpu_seconds)


@dataclass
class _Idle:
    """Part 2's figures: idle shares (0..1) and the gaps between one job's end and the next
    one's start (s), from the handler's clock and from skiff's ``/requests``."""

    share: float | None
    gaps: list[float]
    skiff_share: float | None
    skiff_gaps: list[float]
    failed: int


def _queue_of_sleepers(skiff: servers.Skiff, endpoint: str, jobs: int) -> _Idle:
    ids = [skiff.submit(endpoint, {"sleep": SLEEP_S}) for _ in range(jobs)]
    finals = _wait_all(skiff, endpoint, ids, timeout_s=jobs * (SLEEP_S + 2) + 30)
    done = [f for f in finals.values() if f["status"] == "COMPLETED"]
    handler = [(float(f["output"]["started"]), float(f["output"]["finished"])) for f in done]
    page = skiff.http.get(f"/v2/{endpoint}/requests", params={"limit": 200}).json()
    spans = [
        (_ts(job["startedAt"]), _ts(job["finishedAt"]))
        for job in page["requests"]
        if job["id"] in finals and job.get("startedAt") and job.get("finishedAt")
    ]
    share, gaps = _idle(handler)
    skiff_share, skiff_gaps = _idle(spans)
    return _Idle(share, gaps, skiff_share, skiff_gaps, len(ids) - len(done))


@dataclass
class _Drain:
    """Part 4's figures: seconds from the first submission to the last completion, the ideal
    (the jobs' own time spread over the workers), and how many did not complete."""

    seconds: float
    ideal: float
    failed: int


def _backlog(skiff: servers.Skiff, endpoint: str, jobs: int) -> _Drain:
    began = time.time()
    ids = [skiff.submit(endpoint, {"sleep": BACKLOG_SLEEP_S}) for _ in range(jobs)]
    finals = _wait_all(skiff, endpoint, ids, timeout_s=jobs * (BACKLOG_SLEEP_S + 1) + 60)
    done = [f for f in finals.values() if f["status"] == "COMPLETED"]
    # The handler's own clock for the end (the same clock as ``began``: this host's).
    last = max((float(f["output"]["finished"]) for f in done), default=began)
    return _Drain(last - began, jobs * BACKLOG_SLEEP_S / WORKERS, len(ids) - len(done))


def _drain_rows(drain: _Drain, jobs: int) -> list[Row]:
    where = f"{jobs} queued {BACKLOG_SLEEP_S:g} s jobs, {WORKERS} default workers"
    ratio = drain.seconds / drain.ideal
    return [
        Row(
            "B6",
            f"backlog drained, first submission -> last end (s), {where}",
            drain.seconds,
            "n/a: no workers",
            digits=2,
        ),
        Row(
            "B6",
            f"backlog drain / ideal (x), {where}",
            ratio,
            "n/a: no workers",
            "<= 1.2x",
            ratio <= 1.2,
            digits=2,
        ),
    ]


def _wait_all(
    skiff: servers.Skiff, endpoint: str, ids: list[str], timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Each job's final ``/status``. The jobs run in about their order, so only the last one
    still unfinished is asked after, not the whole queue every time."""
    pending = list(ids)
    finals: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} jobs unfinished after {timeout_s:.0f} s")
        status = skiff.status(endpoint, pending[-1])
        if status["status"] in TERMINAL:
            finals[pending.pop()] = status
        else:
            time.sleep(POLL_S)
    return finals


def _idle(spans: list[tuple[float, float]]) -> tuple[float | None, list[float]]:
    """The worker's idle share, 1 - busy / (last end - first start), and the gaps between
    consecutive jobs (s); no share for fewer than two jobs."""
    if len(spans) < 2:
        return None, []
    spans = sorted(spans)
    busy = sum(end - start for start, end in spans)
    share = 1 - busy / (spans[-1][1] - spans[0][0])
    gaps = [later[0] - earlier[1] for earlier, later in itertools.pairwise(spans)]
    return share, gaps


def _load_rows(loads: dict[int, LoadResult]) -> list[Row]:
    inline = "n/a (inline; see B2)"
    rows = []
    for level, load in loads.items():
        where = f"{WORKERS} default workers, {level} conns"
        rows += [
            Row(
                "B6", f"/runsync jobs/s, {where}", load.rate, inline, digits=1, key=f"rate_{level}"
            ),
            Row(
                "B6", f"/runsync p50 latency (ms), {where}", load.p50_ms, inline, key=f"p50_{level}"
            ),
            Row("B6", f"/runsync p99 latency (ms), {where}", load.p99_ms, inline),
        ]
    # Filled in by __main__.cross_rows when B2 ran in the same run.
    absent = "n/a: B2 not in this run"
    rows += [
        Row(
            "B6",
            "jobs/s at 16 conns / B2's jobs/s at 16 conns (%)",
            absent,
            "n/a",
            ">= 50% of B2's jobs/s",
            digits=1,
            key="b2_rate_share",
        ),
        Row(
            "B6",
            "p50 at 16 conns / B2's p50 at 16 conns (x)",
            absent,
            "n/a",
            "p50 <= 2x B2's",
            digits=1,
            key="b2_p50_ratio",
        ),
    ]
    return rows


def _idle_rows(idle: _Idle, queued: int) -> list[Row]:
    where = f"1 default worker, {queued} queued {SLEEP_S:g} s jobs"
    none = "n/a: fewer than 2 jobs completed"
    # A cell, never NaN: results.json is written without NaN.
    share = idle.share * 100 if idle.share is not None else none
    gap = statistics.mean(idle.gaps) * 1000 if idle.gaps else none
    skiff_share = idle.skiff_share * 100 if idle.skiff_share is not None else none
    skiff_gap = statistics.mean(idle.skiff_gaps) * 1000 if idle.skiff_gaps else none
    return [
        Row(
            "B6",
            f"worker idle between jobs, handler's clock (%), {where}",
            share,
            "n/a: no workers",
            "< 5%",
            idle.share is not None and idle.share < 0.05,
            digits=1,
        ),
        Row(
            "B6",
            f"mean gap, one job's end -> the next one's start, handler's clock (ms), {where}",
            gap,
            "n/a: no workers",
        ),
        Row(
            "B6",
            f"worker idle between jobs, startedAt/finishedAt of /requests (%), {where}",
            skiff_share,
            "n/a: no workers",
            digits=1,
        ),
        Row(
            "B6",
            f"mean gap, finishedAt -> the next startedAt of /requests (ms), {where}",
            skiff_gap,
            "n/a: no workers",
        ),
    ]


def _sequential_rows(where: str, load: LoadResult, inline: LoadResult) -> list[Row]:
    label = f"sequential /runsync, {where} (reference: inline)"
    return [
        Row("B6", f"{label}: requests/s", load.rate, inline.rate, digits=1),
        Row("B6", f"{label}: p50 latency (ms)", load.p50_ms, inline.p50_ms, digits=1),
        Row("B6", f"{label}: p99 latency (ms)", load.p99_ms, inline.p99_ms, digits=1),
    ]


def _ts(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
