"""A runpod-SDK worker for the Ray provider's tests: it says in its log which job it runs and
on which GPUs, and returns them with its process id."""

import os
import time

import runpod


def handler(job):
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(f"running job {job['id']} on CUDA_VISIBLE_DEVICES={cuda}", flush=True)
    time.sleep(job["input"].get("sleep", 0))
    return {"cuda": cuda, "pid": os.getpid(), "worker": os.environ.get("RUNPOD_POD_ID")}


runpod.serverless.start({"handler": handler})
