"""Workers this replica ends itself (its shutdown, or losing the lead) were stopped as asked, not
failed starts, however soon after their start that comes: the real ``Fleet`` with the real
``LocalProvider`` on a real SQLite store."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from skiff.app import build_services, open_cluster
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.templates import Template
from skiff.services.hub import Services
from skiff.store.sqlite import SQLiteStore

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


async def started(tmp_path: Path, store: SQLiteStore, clock: ManualClock) -> Services:
    settings = Settings(data_dir=tmp_path / "data", worker_stop_grace_seconds=0.2)
    services = build_services(settings, store, clock, open_cluster(settings))
    await store.create_template(
        "u1",
        Template(id="t1", name="sleeper", imageName="local/sleeper", dockerStartCmd=SLEEPER),
        clock.now(),
    )
    endpoint = await store.create_endpoint(
        Endpoint(
            id="ep1",
            userId="u1",
            version=1,
            createdAt=clock.now(),
            spec=EndpointSpec(name="ep", templateId="t1", computeType=ComputeType.CPU),
        )
    )
    worker = await services.fleet.start_worker(endpoint)
    assert worker is not None and worker.pid is not None
    return services


@pytest.mark.parametrize("ending", ["shutdown", "abandon"])
async def test_a_worker_ended_by_its_server_right_after_its_start_is_no_failed_start(
    tmp_path: Path,
    store: SQLiteStore,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    ending: str,
) -> None:
    services = await started(tmp_path, store, clock)
    caplog.set_level(logging.WARNING)

    await getattr(services.fleet, ending)()

    assert await store.worker_failure("ep1") is None
    assert "right after it started" not in caplog.text
    assert services.fleet.may_start("ep1")
    assert await store.list_workers("ep1") == []
