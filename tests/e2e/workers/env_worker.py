"""A runpod-SDK worker that answers with the environment variables its input names, after
sleeping ``sleep`` seconds (the secrets tests read what a worker started with)."""

import os
import time

import runpod


def handler(job):
    time.sleep(job["input"].get("sleep", 0))
    return {name: os.environ.get(name) for name in job["input"]["names"]}


runpod.serverless.start({"handler": handler})
