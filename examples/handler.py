"""An ordinary runpod worker: nothing in it knows about skiff."""

import time

import runpod


def handler(job):
    name = job["input"].get("name", "world")
    time.sleep(job["input"].get("seconds", 0))
    return {"greeting": f"hello, {name}"}


runpod.serverless.start({"handler": handler})
