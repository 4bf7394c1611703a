"""B9: a Flash function's warm call (issue 35), through runpod-flash's own client and as the
request it sends, in one run.

One skiff server. runpod-flash 1.21.0, unmodified, in a process of its own on the live path
(``FLASH_IS_LIVE_PROVISIONING=true``): it saves a CPU endpoint and calls an ``async`` function
that sleeps the milliseconds it is given, first cold (provisioning, the worker's start), then a
second time (warm), then ``calls`` more times with 0 ms and with ``SLEEP_MS``: the function's
own time is known, so the rest is overhead. That overhead is mostly the client's own: it sends
``/run``, then polls ``/status`` with a back-off from 100 ms and fetches logs and metrics with a
new HTTP client for each request (about 380 ms on a call skiff answers in a few milliseconds;
docs/flash.md has the trace). So the same call is also measured without that client: the
function's ``FunctionRequest`` (its source and arguments, as Flash sends them) as a sequential
``/runsync`` on the warm worker, against the reference: the same Flash worker under the SDK's
local test server, which runs the handler inline.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import orjson

from bench import servers
from bench.common import skiff_load
from bench.load import LoadSpec, percentile, run_load
from bench.results import BenchResult, Options, Row, summary

#: The function's own time in the timed calls.
SLEEP_MS = 50
FUNCTION = "\n".join(
    [
        "async def pause(ms):",
        "    import asyncio",
        "",
        "    await asyncio.sleep(ms / 1000)",
        "    return ms",
        "",
    ]
)
SCRIPT = f"""
import asyncio, json, os, sys, time
from runpod_flash import Endpoint

ENV = json.loads(os.environ["WORKER_ENV"])
CALLS, SLEEP_MS = int(sys.argv[1]), int(sys.argv[2])


@Endpoint(name="bench-flash", cpu="cpu3c-2-4", env=ENV)
{FUNCTION}

async def timed(ms):
    started = time.perf_counter()
    assert await pause(ms) == ms
    return (time.perf_counter() - started) * 1000


async def main():
    out = {{"first_ms": await timed(0), "second_ms": await timed(0)}}
    out["zero_ms"] = [await timed(0) for _ in range(CALLS)]
    out["sleep_ms"] = [await timed(SLEEP_MS) for _ in range(CALLS)]
    print(json.dumps(out))


asyncio.run(main())
"""
#: The request runpod-flash sends for ``pause(0)``, as plain JSON arguments.
REQUEST = orjson.dumps(
    {
        "input": {
            "function_name": "pause",
            "function_code": FUNCTION,
            "args": [0],
            "serialization_format": "json",
        }
    }
).decode()


def _flash_client(skiff: servers.Skiff, calls: int) -> dict[str, object]:
    scratch = skiff.data_dir.parent / "b9-flash-client"
    scratch.mkdir(exist_ok=True)
    (scratch / "app.py").write_text(SCRIPT)
    env = {
        **os.environ,
        "RUNPOD_API_KEY": skiff.key,
        "RUNPOD_API_BASE_URL": skiff.url,
        "RUNPOD_ENDPOINT_BASE_URL": f"{skiff.url}/v2",
        "RUNPOD_REST_API_URL": f"{skiff.url}/v1",
        "RUNPOD_HAPI_URL": skiff.url,
        "FLASH_IS_LIVE_PROVISIONING": "true",
        "RUNPOD_URL_MIXED_OK": "1",
        "HOME": str(scratch),
        "WORKER_ENV": json.dumps({"BENCH_RUN_TOKEN": skiff.token}),
    }
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "app.py", str(calls), str(SLEEP_MS)],
        env=env,
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"runpod-flash failed: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _p50(samples: object) -> float:
    assert isinstance(samples, list)
    return percentile(sorted(float(s) for s in samples), 50)


def run(opts: Options) -> BenchResult:
    calls = opts.pick(30, 5)
    requests = opts.pick(200, 10)
    result = BenchResult("B9", f"a warm Flash function call, {calls} calls, {requests} requests")
    with servers.skiff(opts.logs, "b9", opts.scratch) as skiff:
        opts.say(f"B9: runpod-flash's client, {calls} calls of 0 and {SLEEP_MS} ms")
        flash = _flash_client(skiff, calls)
        endpoint = next(
            e["id"]
            for e in skiff.http.get("/v1/endpoints").json()
            if e["name"] == "live-bench-flash"
        )
        opts.say(f"B9: the FunctionRequest as /runsync x {requests}, one at a time")
        spec = skiff_load(skiff, "POST", [f"/v2/{endpoint}/runsync"], requests, 1)
        mine = run_load(dataclasses.replace(spec, body=REQUEST))
    with servers.flash_reference(opts.logs, "b9") as ref:
        opts.say(f"B9: reference /runsync x {requests}, one at a time")
        spec = LoadSpec("127.0.0.1", ref.port, "POST", ["/runsync"], requests, 1, body=REQUEST)
        inline = run_load(spec)
    zero, slept = _p50(flash["zero_ms"]), _p50(flash["sleep_ms"])
    client_only = "n/a: runpod-flash's client provisions through GraphQL"
    result.rows += [
        Row(
            "B9", "first call, cold (provision, start, install, call): ms", flash["first_ms"], "n/a"
        ),
        Row("B9", "second call through runpod-flash: ms", flash["second_ms"], client_only),
        Row("B9", "warm call through runpod-flash, function 0 ms: p50 ms", zero, client_only),
        Row(
            "B9",
            f"the same, function {SLEEP_MS} ms: overhead over it, p50 ms",
            slept - SLEEP_MS,
            client_only,
        ),
        Row(
            "B9",
            "the call's FunctionRequest as /runsync on the warm worker: p50 ms",
            mine.p50_ms,
            inline.p50_ms,
            goal="≤ 100 ms of overhead",
            met=mine.p50_ms <= 100,
            digits=1,
        ),
        Row("B9", "the same: p99 ms", mine.p99_ms, inline.p99_ms, digits=1),
    ]
    result.add_errors("skiff", mine)
    result.add_errors("reference", inline)
    result.rows.append(result.error_row())
    result.latencies["B9 FunctionRequest /runsync, one at a time"] = {
        "skiff": mine.latencies_ms,
        "reference (inline)": inline.latencies_ms,
    }
    result.details = {
        "flash_client_ms": flash,
        "runsync": summary(mine),
        "reference": summary(inline),
    }
    return result
