"""A runpod-SDK handler that asks for a fresh worker after every job (refresh_worker)."""

import os
import uuid

import runpod

#: This process, whatever its pid looks like from inside its sandbox's PID namespace.
INSTANCE = uuid.uuid4().hex


def handler(job):
    return {"pid": os.getpid(), "instance": INSTANCE, "refresh_worker": True}


runpod.serverless.start({"handler": handler})
