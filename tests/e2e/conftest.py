"""Fixtures of the end-to-end suite: a real server, the real runpod SDK as its client."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Server, running

from docker_image import docker_client, ensure_test_image
from flash_programs import FLASH_GPU, FLASH_LB_DOMAIN
from pgtest import fresh_schema_sync


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("skiff") / "data") as srv:
        yield srv


@pytest.fixture(scope="module")
def flash_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server for runpod-flash's live path, with one declared GPU of ``FLASH_GPU``."""
    env: dict[str, str | None] = {
        "SKIFF_GPUS": f"{FLASH_GPU}:1",
        # Load-balanced Flash endpoints: reached as https://{id}.{domain}, as Flash builds it.
        "SKIFF_LB_DOMAIN": FLASH_LB_DOMAIN,
        "SKIFF_LB_WAIT_SECONDS": "60",
    }
    with running(tmp_path_factory.mktemp("flash") / "data", env=env) as started:
        yield started


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory of the host's outside ``/tmp`` (in the checkout), removed after: a file a
    test writes there is seen by a sandboxed worker, whose ``/tmp`` is its own."""
    made = Path(tempfile.mkdtemp(prefix=".e2e-shared-", dir=Path(__file__).resolve().parents[2]))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="module")
def image() -> str:
    """The container tests' worker image (tests/containers), built once per machine."""
    docker_client()
    return ensure_test_image()


@pytest.fixture(scope="module")
def runpod_client(server: Server) -> Any:
    """The unmodified runpod SDK, pointed at this server the way a user would point it."""
    os.environ["RUNPOD_ENDPOINT_BASE_URL"] = f"{server.url}/v2"
    import runpod

    runpod.api_key = server.key
    runpod.endpoint_url_base = f"{server.url}/v2"
    return runpod


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema of the test PostgreSQL (the test skips, saying how to enable it, when
    there is none)."""
    with fresh_schema_sync() as name:
        yield name
