"""A runpod-SDK worker that takes up to ``E2E_CONCURRENCY`` jobs at once (default 4), through
the SDK's documented ``concurrency_modifier``: it polls with ``job-take-batch``."""

import os
import time

import runpod

CONCURRENCY = int(os.environ.get("E2E_CONCURRENCY", "4"))


def handler(job):
    time.sleep(job["input"].get("sleep", 0))
    return {"echo": job["input"]}


runpod.serverless.start({"handler": handler, "concurrency_modifier": lambda _current: CONCURRENCY})
