"""B8: a load-balancing endpoint's requests through skiff, against the same worker called
straight, in one run.

One skiff server, one load-balancing endpoint (``type: LB``) with exactly one worker
(``workersMin = workersMax = 1``): ``bench/lb_worker.py``, a FastAPI app on uvicorn that
answers ``POST /generate`` with a small JSON body. The same load is sent twice at each
concurrency: to ``/lb/{id}/generate`` with the caller's key (skiff checks the key, picks the
worker, passes the request on and streams the answer back), and to the worker's own port, as
if there were no platform in front of it. The worker is started by skiff, so it runs pinned
with the server: called straight it has that CPU to itself; through skiff it shares it with
the server, which is what a request through skiff costs.

There is no hosted reference to run here (its load balancer is a service); the worker called
straight is the ceiling any platform in front of it can reach, and the ratios say how close
skiff gets.
"""

from __future__ import annotations

from typing import Any

from bench import servers
from bench.common import BODY, skiff_load
from bench.load import LoadSpec, run_load
from bench.pinning import REPO_ROOT
from bench.results import BenchResult, Options, Row, summary

WORKER = REPO_ROOT / "bench" / "lb_worker.py"
LEVELS = (4, 16)
#: What the worker prints once it listens, before its port.
LISTENING = "BENCH lb listening on "


def run(opts: Options) -> BenchResult:
    requests = opts.pick(5_000, 200)
    warmup = opts.pick(300, 20)
    result = BenchResult(
        "B8", f"load-balancing endpoint, one FastAPI worker, {requests} requests per concurrency"
    )
    through: dict[int, Any] = {}
    straight: dict[int, Any] = {}
    with servers.skiff(opts.logs, "b8", opts.scratch) as skiff:
        endpoint = skiff.create_endpoint(
            {}, WORKER, type="LB", workersMin=1, workersMax=1, scalerValue=1000, idleTimeout=3600
        )
        port = skiff.wait_for(
            "the load-balancing worker to listen", lambda: _worker_port(skiff, endpoint), 120
        )
        # Ready means passing /ping, which the leader asks every half second.
        skiff.wait_for(
            "the worker in rotation",
            lambda: skiff.http.post(f"/lb/{endpoint}/generate", content=BODY).status_code == 200,
            60,
        )
        for level in LEVELS:
            opts.say(f"B8: through skiff's /lb x {requests} at {level} connections")
            spec = skiff_load(
                skiff,
                "POST",
                [f"/lb/{endpoint}/generate"],
                requests + warmup,
                level,
                warmup=warmup,
            )
            through[level] = run_load(spec, server_cpu=skiff.cpu_seconds)
            opts.say(f"B8: straight to the worker x {requests} at {level} connections")
            direct = LoadSpec(
                "127.0.0.1",
                port,
                "POST",
                ["/generate"],
                requests + warmup,
                level,
                body=BODY,
                warmup=warmup,
            )
            straight[level] = run_load(direct)
    for level in LEVELS:
        mine, ceiling = through[level], straight[level]
        result.rows += [
            Row(
                "B8",
                f"requests/s at {level} conns (worker straight)",
                round(mine.rate),
                round(ceiling.rate),
            ),
            Row(
                "B8",
                f"p50 ms at {level} conns (worker straight)",
                mine.p50_ms,
                ceiling.p50_ms,
                digits=2,
            ),
            Row(
                "B8",
                f"p99 ms at {level} conns (worker straight)",
                mine.p99_ms,
                ceiling.p99_ms,
                digits=2,
            ),
            Row(
                "B8",
                f"server CPU per request at {level} conns (µs)",
                round(mine.server_cpu_us),
                "n/a",
            ),
        ]
        result.add_errors("skiff", mine)
        result.add_errors("reference", ceiling)
        result.latencies[f"B8 LB request at {level} conns"] = {
            "skiff /lb": mine.latencies_ms,
            "worker straight": ceiling.latencies_ms,
        }
    result.rows.append(result.error_row())
    result.details = {
        "through_skiff": {level: summary(r) for level, r in through.items()},
        "worker_straight": {level: summary(r) for level, r in straight.items()},
    }
    return result


def _worker_port(skiff: servers.Skiff, endpoint: str) -> int | None:
    for entry in skiff.log_lines(endpoint):
        line = str(entry["line"])
        if line.startswith(LISTENING):
            return int(line.removeprefix(LISTENING))
    return None
