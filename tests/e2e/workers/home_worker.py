"""A runpod-SDK handler that leaves a file in its home, says where its home is, and asks for a
fresh worker after its job (refresh_worker)."""

import os
from pathlib import Path

import runpod


def handler(job):
    home = Path(os.environ["HOME"])
    (home / "scratch.bin").write_bytes(b"\0" * 1024 * 1024)
    return {"home": str(home), "refresh_worker": True}


runpod.serverless.start({"handler": handler})
