"""Contract tests of the store's pods (``Store.*pod*``): every test runs on SQLite (a real
database file) and on PostgreSQL (a fresh schema; skipped when no server is reachable), through
the ``store`` fixture of test_store_contract.py.

A pod belongs to one user: another user's id reads as absent and is neither changed nor
deleted. The service's writes (settings, desired status) and the runner's (placement) touch
different columns, so neither undoes the other."""

from __future__ import annotations

from typing import Any

from integration.store import test_store_contract as contract
from integration.store.test_store_contract import T0
from skiff.domain.pods import DesiredStatus, Pod, PodPlacement, PodSpec
from skiff.store.base import Store

#: The contract tests' fixtures: ``store`` is a real SQLite file, then a fresh PostgreSQL schema.
db_path = contract.db_path
store = contract.store

OWNER = "u-1"
OTHER = "u-2"


def pod(pod_id: str = "pod-1", created: float = T0, **changes: Any) -> Pod:
    fields: dict[str, Any] = {
        "id": pod_id,
        "userId": OWNER,
        "spec": PodSpec(
            name=f"name-{pod_id}",
            imageName="registry.local/jupyter:1",
            ports=["8888/http", "22/tcp"],
            env={"A": "1"},
            gpuTypeIds=["NVIDIA A40"],
        ),
        "desiredStatus": DesiredStatus.RUNNING,
        "createdAt": created,
        "lastStatusChange": created,
    }
    fields.update(changes)
    return Pod(**fields)


async def test_a_created_pod_is_read_back_with_every_field(store: Store) -> None:
    made = pod(lastStartedAt=T0 + 1, version=3, restarts=2)
    assert await store.create_pod(made) == made
    assert await store.get_pod(OWNER, "pod-1") == made
    assert await store.list_pods(OWNER) == [made]
    assert await store.list_pods(None) == [made]


async def test_another_users_pod_is_absent_unchanged_and_not_deleted(store: Store) -> None:
    made = await store.create_pod(pod())
    assert await store.get_pod(OTHER, "pod-1") is None
    assert await store.list_pods(OTHER) == []
    stranger = made.model_copy(update={"userId": OTHER, "desiredStatus": DesiredStatus.EXITED})
    assert await store.update_pod_settings(stranger) is None
    assert not await store.delete_pod(OTHER, "pod-1")
    assert await store.get_pod(OWNER, "pod-1") == made


async def test_find_pod_reads_any_owners_pod_by_its_id_alone(store: Store) -> None:
    made = await store.create_pod(pod())
    assert await store.find_pod("pod-1") == made
    assert await store.find_pod("no-such-pod") is None
    await store.delete_pod(OWNER, "pod-1")
    assert await store.find_pod("pod-1") is None


async def test_pods_list_oldest_first_and_everyones_for_the_runner(store: Store) -> None:
    later = await store.create_pod(pod("pod-b", created=T0 + 5))
    first = await store.create_pod(pod("pod-a", created=T0))
    theirs = await store.create_pod(pod("pod-c", created=T0 + 1, userId=OTHER))
    assert await store.list_pods(OWNER) == [first, later]
    assert await store.list_pods(None) == [first, theirs, later]


async def test_settings_and_placement_are_written_apart(store: Store) -> None:
    made = await store.create_pod(pod())
    placed = PodPlacement(
        owner="replica-1", gpuName="NVIDIA A40", gpuIds=[0, 2], portMappings={"8888/http": 40001}
    )
    running = await store.set_pod_placement("pod-1", placed, T0 + 2)
    assert running is not None and running.placement == placed and running.lastStartedAt == T0 + 2
    # The service's write, from a copy read before the placement: the placement stays.
    stopped = made.model_copy(
        update={
            "desiredStatus": DesiredStatus.EXITED,
            "lastStatusChange": T0 + 3,
            "version": 2,
            "restarts": 1,
            "spec": made.spec.model_copy(update={"name": "renamed"}),
        }
    )
    written = await store.update_pod_settings(stopped)
    assert written is not None
    assert written.placement == placed and written.lastStartedAt == T0 + 2
    assert written.desiredStatus is DesiredStatus.EXITED and written.spec.name == "renamed"
    assert (written.version, written.restarts, written.lastStatusChange) == (2, 1, T0 + 3)
    assert await store.get_pod(OWNER, "pod-1") == written


async def test_a_deleted_pod_is_gone_and_its_placement_cannot_come_back(store: Store) -> None:
    await store.create_pod(pod())
    assert await store.delete_pod(OWNER, "pod-1")
    assert await store.get_pod(OWNER, "pod-1") is None
    assert await store.set_pod_placement("pod-1", PodPlacement(owner="r"), T0) is None
    assert not await store.delete_pod(OWNER, "pod-1")


async def test_a_running_pod_is_stopped_alone_and_a_stopped_or_deleted_one_is_left(
    store: Store,
) -> None:
    made = await store.create_pod(pod())
    await store.create_pod(pod("pod-2", desiredStatus=DesiredStatus.EXITED))
    await store.create_pod(pod("pod-3", desiredStatus=DesiredStatus.TERMINATED))
    placed = await store.set_pod_placement("pod-1", PodPlacement(owner="replica-1"), T0 + 1)
    assert placed is not None

    stopped = await store.stop_running_pod("pod-1", T0 + 2)
    assert stopped == placed.model_copy(
        update={"desiredStatus": DesiredStatus.EXITED, "lastStatusChange": T0 + 2}
    )
    assert stopped.spec == made.spec
    assert await store.stop_running_pod("pod-1", T0 + 3) is None
    assert await store.stop_running_pod("pod-2", T0 + 3) is None
    assert await store.stop_running_pod("pod-3", T0 + 3) is None
    assert await store.stop_running_pod("no-such-pod", T0 + 3) is None
    statuses = {p.id: (p.desiredStatus, p.lastStatusChange) for p in await store.list_pods(None)}
    assert statuses == {
        "pod-1": (DesiredStatus.EXITED, T0 + 2),
        "pod-2": (DesiredStatus.EXITED, T0),
        "pod-3": (DesiredStatus.TERMINATED, T0),
    }
