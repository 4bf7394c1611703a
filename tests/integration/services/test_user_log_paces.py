"""All of a user's output on this server shares one pace: the real scaler, ``Fleet``,
``PodRunner`` and ``LocalProvider`` running real processes on a real SQLite store, each
worker's and pod's output counted against its owner's pace (``SKIFF_LOG_USER_BYTES_PER_SECOND``)."""

from __future__ import annotations

import sys
import time

import pytest

from eventually import eventually_async
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.log_pace import LogPace
from skiff.domain.pods import PodCreate
from skiff.domain.templates import Template
from skiff.domain.users import User
from skiff.services.hub import Services

KIB = 1024
ALICE = User(id="alice", name="alice", is_admin=False, created_at=0.0)
BOB = User(id="bob", name="bob", is_admin=False, created_at=0.0)
#: 300 KiB of output, then a wait until it is ended.
LOUD = [
    sys.executable,
    "-c",
    "import sys, time\nsys.stdout.write(('w' * 1023 + '\\n') * 300)\nsys.stdout.flush()\n"
    "time.sleep(120)",
]


def pace_of(services: Services, user: User) -> LogPace:
    paces = services.logs.files.user_paces
    assert paces is not None, "the server keeps a pace per user by default"
    return paces.of(user.id, time.monotonic())


@pytest.fixture
def services(local_services: Services) -> Services:
    return local_services


async def test_a_workers_output_is_counted_against_its_owners_pace(services: Services) -> None:
    template = Template(id="t1", name="loud", imageName="local/loud", dockerStartCmd=LOUD)
    await services.store.create_template(ALICE.id, template, services.clock.now())
    spec = EndpointSpec.model_validate(
        {
            "name": "ep1",
            "templateId": "t1",
            "computeType": ComputeType.CPU,
            "workersMin": 1,
            "workersMax": 1,
        }
    )
    endpoint = await services.store.create_endpoint(
        Endpoint(id="ep1", userId=ALICE.id, version=1, createdAt=services.clock.now(), spec=spec)
    )
    burst = pace_of(services, ALICE).burst
    await services.scaler.reconcile(endpoint)
    # The pace refills as time passes, at 4 MiB/s: read it at once after the output lands.
    await eventually_async(
        lambda: pace_of(services, ALICE).tokens < burst - 200 * KIB, "alice's pace to be spent"
    )
    assert pace_of(services, BOB).tokens == burst


async def test_a_pods_output_is_counted_against_its_owners_pace(services: Services) -> None:
    services.pod_runner.leading = True
    create = PodCreate.model_validate(
        {
            "imageName": "local/python",
            "computeType": "CPU",
            "volumeInGb": 0,
            "dockerStartCmd": LOUD,
        }
    )
    burst = pace_of(services, BOB).burst
    await services.pods.create(BOB, create)
    await services.pod_runner.reconcile()
    await eventually_async(
        lambda: pace_of(services, BOB).tokens < burst - 200 * KIB, "bob's pace to be spent"
    )
    assert pace_of(services, ALICE).tokens == burst
