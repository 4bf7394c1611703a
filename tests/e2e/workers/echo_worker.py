"""A plain runpod-SDK worker, unmodified from how it would run on the hosted cloud.

Its input picks a behaviour: ``sleep`` seconds, ``progress`` updates, ``raise`` an exception,
return an ``error``, return a result nested ``nest`` levels deep, or echo the input back.
"""

import os
import time

import runpod

#: Tests that count handler runs name a file here; each run appends its job id (one short
#: line per write, so concurrent workers' appends do not interleave).
RECORD = os.environ.get("E2E_RECORD")


def handler(job):
    job_input = job["input"]
    if RECORD:
        with open(RECORD, "a") as record:
            record.write(job["id"] + "\n")
    for update in job_input.get("progress", []):
        runpod.serverless.progress_update(job, update)
        time.sleep(job_input.get("progress_pause", 0.5))
    if "sleep" in job_input:
        time.sleep(job_input["sleep"])
    if "raise" in job_input:
        raise ValueError(job_input["raise"])
    if "error" in job_input:
        return {"error": job_input["error"]}
    if "nest" in job_input:  # a result nested this many arrays deep
        nested = []
        for _ in range(job_input["nest"] - 1):
            nested = [nested]
        return nested
    if job_input.get("show_s3"):
        return {"s3Config": job.get("s3Config")}
    return {"echo": job_input}


runpod.serverless.start({"handler": handler})
