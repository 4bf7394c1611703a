"""A runpod-SDK handler that asks for a fresh worker after every job (refresh_worker)."""

import os

import runpod


def handler(job):
    return {"pid": os.getpid(), "refresh_worker": True}


runpod.serverless.start({"handler": handler})
