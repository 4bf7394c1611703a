"""A runpod-SDK generator handler: each yielded value is a stream chunk."""

import time

import runpod


def handler(job):
    job_input = job["input"]
    for i in range(job_input.get("chunks", 5)):
        time.sleep(job_input.get("pause", 0.1))
        yield {"index": i, "text": f"chunk-{i}"}


runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
