"""The test image's worker: proves it runs inside the image (a file only the image has),
and reports what the container sees (environment, network volume)."""

import os
from pathlib import Path

import runpod


def handler(job):
    data = job["input"] or {}
    volume = Path("/runpod-volume")
    if "write" in data:
        (volume / data["write"]["name"]).write_text(data["write"]["text"])
    read = data.get("read")
    return {
        "marker": Path("/etc/skiff-test-image").read_text().strip(),
        "path": os.environ.get("PATH", ""),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "custom": os.environ.get("SKIFF_TEST_VAR"),
        "read": (volume / read).read_text() if read else None,
    }


runpod.serverless.start({"handler": handler})
