"""A pod's ``status`` (``domain/pods.runtime_status``): what runs now, told from what the user
asked for and what the runner's placement says its instance reflects."""

from __future__ import annotations

import pytest

from skiff.domain.pods import DesiredStatus, Pod, PodPlacement, PodSpec, runtime_status


def pod(desired: DesiredStatus = DesiredStatus.RUNNING, **placement: object) -> Pod:
    return Pod(
        id="p1",
        userId="u",
        spec=PodSpec(name="p", imageName="x"),
        desiredStatus=desired,
        createdAt=0.0,
        lastStatusChange=0.0,
        version=2,
        restarts=1,
        placement=PodPlacement.model_validate(placement),
    )


@pytest.mark.parametrize(
    ("desired", "placement", "status"),
    [
        (DesiredStatus.RUNNING, {"owner": "r", "version": 2, "restarts": 1}, "running"),
        # Asked for a restart (restarts moved on): not yet done.
        (DesiredStatus.RUNNING, {"owner": "r", "version": 2, "restarts": 0}, "restarting"),
        (
            DesiredStatus.RUNNING,
            {"owner": "r", "version": 2, "restarts": 1, "restarting": True},
            "restarting",
        ),
        # Asked for a fresh instance (an update, a reset): on its way.
        (DesiredStatus.RUNNING, {"owner": "r", "version": 1, "restarts": 1}, "starting"),
        (DesiredStatus.RUNNING, {}, "starting"),
        (DesiredStatus.RUNNING, {"problem": "no GPU free"}, "waiting"),
        (DesiredStatus.EXITED, {"owner": "r", "version": 2, "restarts": 1}, "stopping"),
        (DesiredStatus.EXITED, {}, "stopped"),
        (DesiredStatus.TERMINATED, {"owner": "r"}, "terminating"),
    ],
)
def test_the_status_says_what_runs_now(
    desired: DesiredStatus, placement: dict[str, object], status: str
) -> None:
    assert runtime_status(pod(desired, **placement)) == status
