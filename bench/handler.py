"""The no-op handler every benchmark runs: skiff's local worker and the reference server.

As a skiff worker (``python bench/handler.py``) it is an ordinary runpod-SDK worker. As the
reference (``python bench/handler.py --rp_serve_api --rp_api_host H --rp_api_port P``) the SDK
serves its own local test API (``/run``, ``/runsync``, ``/status``) and runs the handler inline.

It prints ``BENCH <event> <epoch seconds>`` lines that the scale-from-zero benchmark (B5) reads
back from skiff's worker logs: ``imported`` before anything is imported (the interpreter is up),
``ready`` once the SDK is imported (just before ``runpod.serverless.start``) and ``first-job``
when the handler first runs. The times come from the worker's own clock (``time.time()``, the
same clock skiff stamps records with), so they are exact rather than the log reader's.

``BENCH_CONCURRENCY`` (unset: the SDK default) is handed to the SDK as its documented
``concurrency_modifier``: how many jobs one worker holds at once. It matters more than it
looks: at the default of 1 the SDK's job loop sleeps 1 s after every take (``rp_scale.get_jobs``
finds no free slot and waits), so a worker serves about one job per second however fast the
server is. The same pause caps any worker that fills up: a worker holding ``C`` jobs sleeps a
second, so ``W`` workers drain at most about ``C * W`` jobs per second. The suite's default,
1024, keeps that ceiling (4,096 jobs/s for B3's four workers) above what it measures.

A job whose input has ``"sleep": S`` (seconds, a float) sleeps that long in the handler, the
way a real handler holds its worker, and answers with its own start and end (``started``,
``finished``: ``time.time()``), so B6 reads how long the worker sat idle between jobs from the
worker's clock. Every other job (no ``"sleep"``) answers as before.
"""

import time

_IMPORTED = time.time()
print(f"BENCH imported {_IMPORTED:.6f}", flush=True)

import os  # noqa: E402 - after the first timestamp, on purpose
from typing import Any  # noqa: E402

import runpod  # noqa: E402

_CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "0"))
_first = True


def handler(job: dict[str, Any]) -> dict[str, Any]:
    global _first
    if _first:
        _first = False
        print(f"BENCH first-job {time.time():.6f}", flush=True)
    sleep = float(job["input"].get("sleep", 0))
    if sleep > 0:
        started = time.time()
        time.sleep(sleep)
        return {"ok": True, "started": started, "finished": time.time()}
    return {"ok": True}


def concurrency(current: int) -> int:
    del current
    return _CONCURRENCY


if __name__ == "__main__":
    config: dict[str, Any] = {"handler": handler}
    if _CONCURRENCY > 0:
        config["concurrency_modifier"] = concurrency
    print(f"BENCH ready {time.time():.6f}", flush=True)
    runpod.serverless.start(config)
