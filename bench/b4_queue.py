"""B4: one endpoint with a huge queue: does a deep queue slow ``/run`` and ``/status`` down,
or grow the server's memory?

On one skiff server (endpoint with ``workersMax: 0``, so nothing is taken):

1. empty queue: ``/run`` at B1's settings (16 connections), ``GET /status`` p50/p99 on random
   ids of those jobs, the server's RSS (``VmRSS`` of ``/proc/PID/status``);
2. fill: ``POST /run`` over 16 connections until ``--b4-jobs`` jobs are queued, in ten
   rounds, RSS and rate after each (the curve in the plot); an id of every k-th job is kept so
   that step 3 can ask for jobs anywhere in the queue;
3. full queue: the same ``/run`` and ``/status`` loads again (``/status`` twice: the first pass
   reads back from disk what the host's page cache let go of during the fill), and RSS.

The reference has no queue, so the queue-size effects are n/a for it; its ``/status`` p99 is
shown for scale only (its ``/status`` runs the handler inline for a job ``/run`` stored, and
forgets the job: each id is asked once). It finds a job by scanning every stored one and
rewrites the list of all ids on every change (see B1), so it is measured with at most
``REFERENCE_JOBS`` jobs stored, where it is at its best.
"""

from __future__ import annotations

import random

from bench import servers
from bench.common import reference_load, skiff_load
from bench.load import LoadResult, run_load
from bench.results import BenchResult, Options, Row, summary

CONNECTIONS = 16
ROUNDS = 10
#: How many job ids the fill keeps (evenly spread) for the status load.
KEPT_IDS = 20_000
#: Jobs stored in the reference for its /status figure.
REFERENCE_JOBS = 1_000


def run(opts: Options) -> BenchResult:
    target = opts.b4_jobs
    probe = opts.pick(20_000, 500)
    statuses = opts.pick(20_000, 500)
    warmup = opts.pick(1_000, 100)
    result = BenchResult("B4", f"{target:,} queued jobs on one endpoint")
    rng = random.Random(4)
    curve: list[list[float]] = []
    rates: list[list[float]] = []
    with servers.skiff(opts.logs, "b4", opts.scratch) as skiff:
        endpoint = skiff.create_endpoint({}, workersMin=0, workersMax=0)
        run_path = [f"/v2/{endpoint}/run"]
        opts.say("B4: empty queue")
        run_load(skiff_load(skiff, "POST", run_path, warmup, CONNECTIONS))
        rss_empty = skiff.rss_mib()
        empty_run = run_load(
            skiff_load(skiff, "POST", run_path, probe, CONNECTIONS, keep_ids_every=1),
            server_cpu=skiff.cpu_seconds,
        )
        empty_status = _status(skiff, endpoint, empty_run.ids, statuses, warmup, rng)
        queued = warmup + probe
        curve.append([queued, rss_empty])
        ids = list(empty_run.ids)
        remaining = max(0, target - queued)
        every = max(1, remaining // KEPT_IDS)
        fills: list[LoadResult] = []
        for round_no in range(ROUNDS):
            count = remaining // ROUNDS + (1 if round_no < remaining % ROUNDS else 0)
            if count == 0:
                continue
            fill = run_load(
                skiff_load(
                    skiff,
                    "POST",
                    run_path,
                    count,
                    CONNECTIONS,
                    keep_ids_every=every,
                    return_latencies=False,
                ),
                timeout_s=7200,
            )
            fills.append(fill)
            queued += count
            ids += fill.ids
            curve.append([queued, skiff.rss_mib()])
            rates.append([queued, fill.rate])
            opts.say(f"B4: {queued:,} queued ({fill.rate:,.0f} jobs/s, RSS {curve[-1][1]:.0f} MiB)")
        rss_full = skiff.rss_mib()
        # Twice: the first pass reads rows written minutes ago, which a host that reclaims idle
        # page cache (this suite's VMs do within about 30 s) has to read back from disk; the
        # second pass is the same load once they are in memory again.
        cold_status = _status(skiff, endpoint, ids, statuses, warmup, rng)
        full_status = _status(skiff, endpoint, ids, statuses, warmup, rng)
        full_run = run_load(
            skiff_load(skiff, "POST", run_path, probe, CONNECTIONS), server_cpu=skiff.cpu_seconds
        )
        in_queue = skiff.health(endpoint)["jobs"]["inQueue"]
        disk_mib = sum(f.stat().st_size for f in skiff.data_dir.rglob("*") if f.is_file()) / 2**20
    with servers.reference(opts.logs, "b4", opts.sdk_log_level) as ref:
        opts.say("B4: reference /status")
        submitted = run_load(
            reference_load(
                ref, "POST", ["/run"], min(statuses, REFERENCE_JOBS), CONNECTIONS, keep_ids_every=1
            )
        )
        ref_status = run_load(
            reference_load(
                ref,
                "POST",
                [f"/status/{i}" for i in submitted.ids],
                len(submitted.ids),
                CONNECTIONS,
                body=None,
            )
        )
    for side, load in [
        ("skiff", empty_run),
        ("skiff", empty_status),
        ("skiff", full_run),
        ("skiff", cold_status),
        ("skiff", full_status),
        ("reference", submitted),
        ("reference", ref_status),
        *(("skiff", f) for f in fills),
    ]:
        result.add_errors(side, load)
    fill_jobs = sum(f.requests for f in fills)
    fill_s = sum(f.elapsed_s for f in fills)
    share = full_run.rate / empty_run.rate if empty_run.rate else 0.0
    full = f"{in_queue:,} queued"
    # "Empty" is the fresh endpoint: the probe itself queues its jobs, so say how many.
    empty = f"empty queue (0 -> {warmup + probe:,})"
    result.rows += [
        Row("B4", f"/run jobs/s, {empty}", empty_run.rate, "n/a: no queue"),
        Row("B4", f"/run jobs/s, {full}", full_run.rate, "n/a", key="run_full"),
        Row("B4", "/run jobs/s, full / empty (%)", share * 100, "n/a", ">= 80%", share >= 0.8),
        Row("B4", f"server CPU per /run (µs), {empty}", empty_run.server_cpu_us, "n/a"),
        Row("B4", f"server CPU per /run (µs), {full}", full_run.server_cpu_us, "n/a"),
        Row(
            "B4",
            f"GET /status p50 (ms), {warmup + probe:,} queued",
            empty_status.p50_ms,
            ref_status.p50_ms,
            digits=2,
        ),
        Row(
            "B4",
            f"GET /status p99 (ms), {warmup + probe:,} queued",
            empty_status.p99_ms,
            ref_status.p99_ms,
            digits=2,
        ),
        Row(
            "B4",
            f"GET /status p99 (ms), {full}, first pass after the fill",
            cold_status.p99_ms,
            ref_status.p99_ms,
            digits=2,
        ),
        Row(
            "B4",
            f"GET /status p99 (ms), {full}",
            full_status.p99_ms,
            ref_status.p99_ms,
            "<= 5 ms",
            full_status.p99_ms <= 5,
            digits=2,
        ),
        Row("B4", f"server RSS (MiB), {warmup:,} queued", rss_empty, "n/a", digits=1),
        Row(
            "B4",
            f"server RSS (MiB), {full}",
            rss_full,
            "n/a",
            "independent of queue size (within 20%)",
            rss_full <= rss_empty * 1.2,
            digits=1,
        ),
        Row(
            "B4",
            "fill: /run jobs/s over the whole fill (16 conns)",
            fill_jobs / fill_s if fill_s else 0.0,
            "n/a",
        ),
        Row("B4", "fill time (s)", fill_s, "n/a", digits=1),
        Row("B4", "data directory on disk (MiB)", disk_mib, "n/a", digits=1),
    ]
    result.rows.append(result.error_row())
    result.latencies["B4 GET /status"] = {
        f"skiff, {warmup + probe:,} queued": empty_status.latencies_ms,
        f"skiff, {full}, first pass": cold_status.latencies_ms,
        f"skiff, {full}": full_status.latencies_ms,
        f"reference (POST /status, {REFERENCE_JOBS:,} stored, for scale)": ref_status.latencies_ms,
    }
    result.latencies["B4 POST /run"] = {
        f"skiff, {empty}": empty_run.latencies_ms,
        f"skiff, {full}": full_run.latencies_ms,
    }
    result.curves["B4 server RSS while filling"] = {
        "x": "queued jobs",
        "y": "RSS (MiB)",
        "series": {"skiff": curve},
    }
    result.curves["B4 /run rate while filling"] = {
        "x": "queued jobs",
        "y": "jobs/s (16 conns)",
        "series": {"skiff": rates},
    }
    result.details = {
        "target": target,
        "in_queue": in_queue,
        "empty_run": summary(empty_run),
        "empty_status": summary(empty_status),
        "full_run": summary(full_run),
        "cold_status": summary(cold_status),
        "full_status": summary(full_status),
        "reference_status": summary(ref_status),
        "rss_curve": curve,
        "fill_rates": rates,
    }
    return result


def _status(
    skiff: servers.Skiff,
    endpoint: str,
    ids: list[str],
    count: int,
    warmup: int,
    rng: random.Random,
) -> LoadResult:
    """``GET /status`` of ``count`` ids drawn at random (with replacement) from ``ids``, after
    ``warmup`` more that are not recorded (as every other skiff load here)."""
    paths = [f"/v2/{endpoint}/status/{rng.choice(ids)}" for _ in range(count + warmup)]
    return run_load(skiff_load(skiff, "GET", paths, count + warmup, CONNECTIONS, warmup=warmup))
