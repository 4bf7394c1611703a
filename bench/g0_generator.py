"""G0: the load generator's own ceiling, so no figure is mistaken for the server's limit
when it is the generator's.

The generator (pinned to the load CPU) sends B1's request, over B1's 16 connections, to
``bench/trivial.py`` (raw asyncio, pinned to the server CPU), which answers at once.
"""

from __future__ import annotations

from bench import servers
from bench.common import BODY
from bench.load import LoadSpec, run_load
from bench.results import BenchResult, Options, Row, summary

CONNECTIONS = 16


def run(opts: Options) -> BenchResult:
    requests = opts.pick(50_000, 2_000)
    warmup = opts.pick(2_000, 200)
    result = BenchResult("G0", "load generator ceiling against a trivial responder")
    with servers.trivial(opts.logs) as trivial:
        opts.say(f"G0: generator ceiling x {requests}")
        spec = LoadSpec(
            "127.0.0.1",
            trivial.port,
            "POST",
            ["/run"],
            requests + warmup,
            CONNECTIONS,
            body=BODY,
            warmup=warmup,
        )
        measured = run_load(spec)
    result.add_errors("skiff", measured)
    result.rows += [
        Row(
            "G0",
            f"generator ceiling, req/s ({CONNECTIONS} conns, trivial responder)",
            measured.rate,
            "same generator",
            "far above every figure it measures",
        ),
        Row("G0", "generator p50 latency (ms) at that rate", measured.p50_ms, digits=3),
    ]
    result.details = {"trivial": summary(measured)}
    return result
