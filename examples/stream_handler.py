"""A generator handler: each yielded value is a chunk that `Job.stream()` hands the client."""

import time

import runpod


def handler(job):
    for word in job["input"]["text"].split():
        time.sleep(0.2)
        yield {"word": word}


runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
