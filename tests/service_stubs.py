"""The collaborators a service test leaves out, each the answer of the plain case: a client
still connected, nothing keeping an endpoint's workers from running, any webhook URL allowed,
no queued job to age, a fleet that only records which workers it was told to end; and the plain
endpoint and job a test starts from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skiff.domain.endpoints import Endpoint, EndpointSpec, EndpointType, ScalerType
from skiff.domain.jobs import Job, JobStatus
from skiff.domain.placement import Blocker
from skiff.domain.workers import Worker


async def connected() -> bool:
    return True


async def nothing_blocks(_endpoint: Endpoint, _workers: list[Worker]) -> Blocker | None:
    return None


async def any_webhook(_url: str, _user_id: str) -> None:
    pass


async def no_oldest(_endpoint_id: str) -> float | None:
    return None


@dataclass
class RecordingFleet:
    """Stands in for the process fleet where the reaper ends workers: records which."""

    stopped: list[str] = field(default_factory=list)

    def stop_worker(self, worker: Worker) -> None:
        self.stopped.append(worker.id)


def lb_endpoint(created_at: float, **spec: Any) -> Endpoint:
    """A load-balancing endpoint ``ep1`` of user ``u1``; ``spec`` adds or overrides its fields."""
    fields: dict[str, Any] = {
        "name": "lb",
        "templateId": "t1",
        "type": EndpointType.LB,
        "scalerType": ScalerType.REQUEST_COUNT,
    }
    return Endpoint(
        id="ep1", userId="u1", version=1, createdAt=created_at, spec=EndpointSpec(**(fields | spec))
    )


def a_job(**changes: Any) -> Job:
    """Job ``j1`` of endpoint ``ep1``, queued at 0 with the defaults; ``changes`` set the rest."""
    fields: dict[str, Any] = {
        "id": "j1",
        "endpoint_id": "ep1",
        "status": JobStatus.IN_QUEUE,
        "input_json": "{}",
        "execution_timeout_ms": 600_000,
        "ttl_ms": 86_400_000,
        "low_priority": False,
        "webhook": None,
        "s3_config_json": None,
        "submitted_at": 0.0,
    }
    return Job(**(fields | changes))
