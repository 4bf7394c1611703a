"""The container tests' worker image (tests/containers/build-test-image), built once and then
found by its tag; skips when no Docker daemon answers (.ci/run starts one)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

TAG = "skiff-test/worker:runpod-1.12.0"
#: The Debian base ``build-test-image`` makes the test image on (and the Flash image's).
BASE_TAG = "skiff-test/python:3.11"
SCRIPT = Path(__file__).parent / "containers" / "build-test-image"


def docker_client():  # type: ignore[no-untyped-def]
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # no daemon: nothing to test against
        if os.environ.get("SKIFF_TEST_REQUIRE_DOCKER"):
            # CI starts dockerd: there, a missing daemon is a failure, not a skip.
            pytest.fail(f"no Docker daemon, and SKIFF_TEST_REQUIRE_DOCKER is set: {exc}")
        pytest.skip(f"no Docker daemon: {exc}")
    return client


#: A server whose workers are containers: they reach it through the bridge's gateway, so it
#: listens there too, and a first start may include building or pulling the image.
CONTAINER_SERVER_ENV: dict[str, str | None] = {
    "SKIFF_PROVIDER": "docker",
    "SKIFF_HOST": "0.0.0.0",
    "SKIFF_WORKER_START_TIMEOUT_SECONDS": "60",
}


def containers_of(endpoint_id: str) -> list[Any]:
    """Every container of the endpoint, running or not, by skiff's label."""
    return list(
        docker_client().containers.list(
            all=True,
            ignore_removed=True,
            filters={"label": f"dev.skiff.endpoint-id={endpoint_id}"},
        )
    )


ROOT = Path(__file__).resolve().parents[1]
FLASH_BUILD = ROOT / "images" / "flash-worker" / "build"


def ensure_flash_image() -> str:
    """skiff's Flash worker image as ``images/flash-worker/build`` makes it, on the test
    image's Debian base, tagged by a hash of what goes into it: a changed worker is rebuilt."""

    ensure_test_image()
    digest = hashlib.sha256()
    parts = [FLASH_BUILD.parent / "Dockerfile", FLASH_BUILD]
    parts += sorted((ROOT / "src" / "skiff" / "flash_worker").glob("*.py"))
    for part in parts:
        digest.update(part.read_bytes())
    tag = f"skiff-test/flash-worker:{digest.hexdigest()[:16]}"
    _build(FLASH_BUILD, tag, BASE=BASE_TAG)
    return tag


def ensure_test_image() -> str:
    """The image's tag, building it when it is missing (about a minute, once)."""
    _build(SCRIPT, TAG)
    return TAG


def _build(script: Path, tag: str, **env: str) -> None:
    """``script tag`` (which does nothing when the image is there), one build at a time on this
    machine: test processes side by side (``pytest -n``) that both find an image missing would
    otherwise both build it, and its base, at once."""
    with open(Path(tempfile.gettempdir()) / "skiff-test-images.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [str(script), tag],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHON": sys.executable, **env},
        )


#: A worker for the test image that takes its time (``sleep`` seconds of its input) and answers
#: ``{"i": input.i}``: run as ``[PYTHON_IN_IMAGE, "-c", SLEEPING_HANDLER]`` from a template's
#: ``dockerStartCmd``, so that a container holds a job as long as a test needs.
SLEEPING_HANDLER = """
import time
import runpod

def handler(job):
    data = job["input"] or {}
    time.sleep(data.get("sleep", 0))
    return {"i": data.get("i")}

runpod.serverless.start({"handler": handler})
"""
PYTHON_IN_IMAGE = "/opt/venv/bin/python"
