"""Contract tests of the store's network volumes (``Store.*_network_volume*``): every test runs
on SQLite (a real database file) and on PostgreSQL (a fresh schema; skipped when no server is
reachable), through the ``store`` fixture of test_store_contract.py.

A volume belongs to one user: another user's id reads as absent, and is neither changed nor
deleted. Its size never shrinks, even through the store. It cannot be deleted while an endpoint
or a pod (not one being deleted) of its owner names it."""

from __future__ import annotations

from typing import Any

from integration.store import test_store_contract as contract
from integration.store.test_pod_contract import pod
from integration.store.test_store_contract import T0, make_endpoint
from skiff.domain.endpoints import Endpoint
from skiff.domain.pods import DesiredStatus, Pod
from skiff.domain.volumes import NetworkVolume, VolumeUsers
from skiff.store.base import Store

#: The contract tests' fixtures: ``store`` is a real SQLite file, then a fresh PostgreSQL schema.
db_path = contract.db_path
store = contract.store

OWNER = "u-1"
OTHER = "u-2"


def volume(volume_id: str = "vol-1", **changes: Any) -> NetworkVolume:
    fields: dict[str, Any] = {
        "id": volume_id,
        "name": f"name-{volume_id}",
        "size": 10,
        "dataCenterId": "local",
        "createdAt": T0,
    }
    fields.update(changes)
    return NetworkVolume(**fields)


def endpoint_on(endpoint_id: str, volume_id: str | None, user_id: str = OWNER) -> Endpoint:
    endpoint = make_endpoint(endpoint_id)
    spec = endpoint.spec.model_copy(update={"networkVolumeId": volume_id})
    return endpoint.model_copy(update={"userId": user_id, "spec": spec})


async def test_a_created_volume_is_read_back_with_every_field(store: Store) -> None:
    made = volume(name="models", size=4000, dataCenterId="EU-RO-1")
    assert await store.create_network_volume(OWNER, made) == made
    assert await store.get_network_volume(OWNER, "vol-1") == made
    assert await store.list_network_volumes(OWNER) == [made]


async def test_volumes_are_listed_oldest_first_and_only_to_their_owner(store: Store) -> None:
    second = await store.create_network_volume(OWNER, volume("vol-b", createdAt=T0 + 1))
    first = await store.create_network_volume(OWNER, volume("vol-a", createdAt=T0))
    theirs = await store.create_network_volume(OTHER, volume("vol-c"))
    assert await store.list_network_volumes(OWNER) == [first, second]
    assert await store.list_network_volumes(OTHER) == [theirs]
    assert await store.list_network_volumes("u-nobody") == []


async def test_another_users_volume_is_not_found_changed_or_deleted(store: Store) -> None:
    mine = await store.create_network_volume(OWNER, volume())
    assert await store.get_network_volume(OTHER, "vol-1") is None
    assert await store.update_network_volume(OTHER, "vol-1", "taken", 20) is None
    assert await store.delete_network_volume(OTHER, "vol-1") is None
    assert await store.get_network_volume(OWNER, "vol-1") == mine


async def test_two_volumes_may_share_a_name(store: Store) -> None:
    await store.create_network_volume(OWNER, volume("vol-1", name="data"))
    await store.create_network_volume(OWNER, volume("vol-2", name="data"))
    assert [v.name for v in await store.list_network_volumes(OWNER)] == ["data", "data"]


async def test_an_update_renames_and_grows(store: Store) -> None:
    await store.create_network_volume(OWNER, volume(size=10))
    updated = await store.update_network_volume(OWNER, "vol-1", "renamed", 25)
    assert updated == volume(name="renamed", size=25)
    assert await store.get_network_volume(OWNER, "vol-1") == updated
    # The same size again is no shrink: a rename alone.
    assert await store.update_network_volume(OWNER, "vol-1", "again", 25) == volume(
        name="again", size=25
    )


async def test_an_update_that_would_shrink_changes_nothing(store: Store) -> None:
    await store.create_network_volume(OWNER, volume(size=10))
    after = await store.update_network_volume(OWNER, "vol-1", "renamed", 9)
    # As stored: neither the size nor the name of the refused update.
    assert after == volume(size=10)
    assert await store.get_network_volume(OWNER, "vol-1") == volume(size=10)


async def test_an_update_of_an_unknown_volume_is_none(store: Store) -> None:
    assert await store.update_network_volume(OWNER, "vol-x", "name", 1) is None


async def test_endpoints_naming_a_volume_are_found_for_its_owner(store: Store) -> None:
    await store.create_network_volume(OWNER, volume())
    await store.create_endpoint(endpoint_on("ep-a", "vol-1"))
    await store.create_endpoint(endpoint_on("ep-b", None))
    await store.create_endpoint(endpoint_on("ep-c", "vol-1"))
    # Another user's endpoint can never mount the volume, so it does not hold it either.
    await store.create_endpoint(endpoint_on("ep-d", "vol-1", user_id=OTHER))
    assert await store.endpoints_using_network_volume(OWNER, "vol-1") == ["ep-a", "ep-c"]
    assert await store.endpoints_using_network_volume(OWNER, "vol-2") == []


async def test_an_endpoint_update_attaching_or_detaching_is_seen(store: Store) -> None:
    await store.create_network_volume(OWNER, volume())
    endpoint = endpoint_on("ep-a", None)
    await store.create_endpoint(endpoint)
    attached = endpoint.spec.model_copy(update={"networkVolumeId": "vol-1"})
    await store.update_endpoint("ep-a", attached, bump_version=True)
    assert await store.endpoints_using_network_volume(OWNER, "vol-1") == ["ep-a"]
    await store.update_endpoint("ep-a", endpoint.spec, bump_version=True)
    assert await store.endpoints_using_network_volume(OWNER, "vol-1") == []


async def test_a_volume_an_endpoint_names_is_not_deleted(store: Store) -> None:
    await store.create_network_volume(OWNER, volume())
    await store.create_endpoint(endpoint_on("ep-a", "vol-1"))
    await store.create_endpoint(endpoint_on("ep-b", "vol-1"))
    assert await store.delete_network_volume(OWNER, "vol-1") == VolumeUsers(("ep-a", "ep-b"))
    assert await store.get_network_volume(OWNER, "vol-1") == volume()


async def test_a_volume_is_deleted_once_no_endpoint_names_it(store: Store) -> None:
    await store.create_network_volume(OWNER, volume())
    await store.create_endpoint(endpoint_on("ep-a", "vol-1"))
    assert await store.delete_endpoint("ep-a", 0.0) is True
    assert await store.delete_network_volume(OWNER, "vol-1") == VolumeUsers()
    assert await store.get_network_volume(OWNER, "vol-1") is None
    assert await store.delete_network_volume(OWNER, "vol-1") is None


def pod_on(pod_id: str, volume_id: str | None, user_id: str = OWNER) -> Pod:
    made = pod(pod_id)
    spec = made.spec.model_copy(update={"networkVolumeId": volume_id})
    return made.model_copy(update={"userId": user_id, "spec": spec})


async def test_a_volume_a_pod_names_is_not_deleted_until_the_pod_is_being_deleted(
    store: Store,
) -> None:
    await store.create_network_volume(OWNER, volume())
    await store.create_endpoint(endpoint_on("ep-a", "vol-1"))
    await store.create_pod(pod_on("pod-a", "vol-1"))
    await store.create_pod(pod_on("pod-b", None))
    await store.create_pod(pod_on("pod-c", "vol-1", user_id=OTHER))  # not the owner's volume
    stopped = pod_on("pod-d", "vol-1").model_copy(update={"desiredStatus": DesiredStatus.EXITED})
    await store.create_pod(stopped)
    users = VolumeUsers(endpoints=("ep-a",), pods=("pod-a", "pod-d"))
    assert await store.delete_network_volume(OWNER, "vol-1") == users

    assert await store.delete_endpoint("ep-a", 0.0) is True
    assert await store.delete_pod(OWNER, "pod-a") is True
    assert await store.delete_network_volume(OWNER, "vol-1") == VolumeUsers(pods=("pod-d",))
    # Being deleted (TERMINATED, until the runner removes it): it no longer holds the volume.
    leaving = stopped.model_copy(update={"desiredStatus": DesiredStatus.TERMINATED})
    assert await store.update_pod_settings(leaving) is not None
    assert await store.delete_network_volume(OWNER, "vol-1") == VolumeUsers()
    assert await store.get_network_volume(OWNER, "vol-1") is None
