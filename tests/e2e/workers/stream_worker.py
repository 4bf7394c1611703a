"""A runpod-SDK generator handler: each yielded value is a stream chunk."""

import time

import runpod


def handler(job):
    job_input = job["input"]
    if "big_text" in job_input:
        yield "a" * job_input["big_text"]
        return
    if "big_list" in job_input:
        yield list(range(job_input["big_list"]))
        return
    for i in range(job_input.get("chunks", 5)):
        time.sleep(job_input.get("pause", 0.1))
        yield {"index": i, "text": f"chunk-{i}"}


runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
