"""A runpod-SDK worker that reports the GPUs it was pinned to."""

import os
import time

import runpod


def handler(job):
    time.sleep(job["input"].get("sleep", 0))
    return {
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvidia": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        "pid": os.getpid(),
    }


runpod.serverless.start({"handler": handler})
