"""The services' short-lived copies (an API key's user, an endpoint for the job routes, the
count of an endpoint's live workers) on a real SQLite store: each is reused until its time is
up on the injected clock, then read again. Time moves on a ``ManualClock``, so nothing sleeps.
(Why an endpoint's workers are held back has its own such test in test_worker_placement.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from skiff.api.log_lines import key_still_reads
from skiff.app import build_services, open_cluster
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain import keys
from skiff.domain.endpoints import ComputeType, Endpoint, EndpointSpec
from skiff.domain.permissions import ALL, READ_ONLY, Access
from skiff.domain.templates import Template
from skiff.domain.workers import Worker, WorkerKind, WorkerState
from skiff.errors import Unauthorized
from skiff.services.auth import Auth
from skiff.services.endpoints import RECENT_SECONDS
from skiff.services.hub import Services
from skiff.services.workers import LIVE_COUNT_SECONDS
from skiff.store.sqlite import SQLiteStore

KEY_CACHE_SECONDS = 5.0


@pytest.fixture
async def services(
    tmp_path: Path, store: SQLiteStore, clock: ManualClock
) -> AsyncIterator[Services]:
    # Nothing here starts a worker process.
    settings = Settings(data_dir=tmp_path / "data")
    built = build_services(settings, store, clock, open_cluster(settings))
    await store.create_template(
        "u1", Template(id="t1", name="t", imageName="local/t", dockerStartCmd=["true"]), clock.now()
    )
    await store.create_endpoint(
        Endpoint(
            id="ep1",
            userId="u1",
            version=1,
            createdAt=clock.now(),
            spec=EndpointSpec.model_validate(
                {"name": "ep1", "templateId": "t1", "computeType": ComputeType.CPU}
            ),
        )
    )
    yield built
    await built.fleet.shutdown()


def idle_worker(worker_id: str, now: float) -> Worker:
    return Worker(
        id=worker_id,
        endpoint_id="ep1",
        kind=WorkerKind.EXTERNAL,
        state=WorkerState.IDLE,
        version=1,
        started_at=now,
    )


async def test_a_revoked_key_works_until_its_cached_user_expires(
    store: SQLiteStore, clock: ManualClock
) -> None:
    auth = Auth(store, clock, cache_seconds=KEY_CACHE_SECONDS)
    issued = await auth.issue_key("alice", is_admin=False, label="test")
    header = issued.key
    assert (await auth.authenticate(header)).name == "alice"
    assert await store.revoke_api_key(issued.record.id, clock.now())
    clock.advance(KEY_CACHE_SECONDS - 0.001)
    assert (await auth.authenticate(header)).name == "alice"
    clock.advance(0.001)
    with pytest.raises(Unauthorized, match="invalid or revoked"):
        await auth.authenticate(header)


async def test_a_key_revoked_or_a_user_disabled_here_is_refused_here_at_once(
    services: Services, clock: ManualClock
) -> None:
    """Only other servers wait for their cache to expire."""
    accounts, auth = services.accounts, services.auth
    admin = await auth.ensure_user("root", is_admin=True)
    alice = await accounts.create_user(admin, "alice")
    second = await auth.issue_key("alice", is_admin=False, label="second")
    bob = await accounts.create_user(admin, "bob")
    for key in (alice.key, second.key, bob.key):
        await auth.authenticate(key)  # cached
    await accounts.revoke_key(alice.user, alice.record.id)
    with pytest.raises(Unauthorized, match="invalid or revoked"):
        await auth.authenticate(alice.key)
    assert (await auth.authenticate(second.key)).name == "alice"  # her other key still works
    await accounts.set_disabled(admin, alice.user.id, True)
    with pytest.raises(Unauthorized):
        await auth.authenticate(second.key)
    assert (await auth.authenticate(bob.key)).name == "bob"


async def test_a_followed_logs_key_is_asked_of_the_store_not_the_cache(
    services: Services, store: SQLiteStore, clock: ManualClock
) -> None:
    """A follow outlives the key cache: its check reads the key afresh each time, so a key
    revoked on any server, or its user disabled, ends it."""
    auth = services.auth
    first = await auth.issue_key("alice", is_admin=False, label="first")
    second = await auth.issue_key("alice", is_admin=False, label="second")
    reads_first = key_still_reads(auth, f"Bearer {first.key}", "ep1")
    reads_second = key_still_reads(auth, f"Bearer {second.key}", "ep1")
    assert await reads_first() and await reads_second()
    assert await store.revoke_api_key(first.record.id, clock.now())  # as another server would
    assert not await reads_first()  # no cache time to wait for
    assert await reads_second()
    await store.set_user_disabled(first.user.id, clock.now())
    assert not await reads_second()


async def test_an_unknown_key_stays_refused_from_the_cache_until_it_expires(
    store: SQLiteStore, clock: ManualClock
) -> None:
    # A refusal is cached as well: a key registered meanwhile opens only once it expires.
    auth = Auth(store, clock, cache_seconds=KEY_CACHE_SECONDS)
    user = await auth.ensure_user("bob", is_admin=False)
    key = "rpa_" + "x" * 40
    with pytest.raises(Unauthorized):
        await auth.authenticate(key)
    await auth.register_key(key, user, "late")
    with pytest.raises(Unauthorized):
        await auth.authenticate(key)
    clock.advance(KEY_CACHE_SECONDS)
    assert (await auth.authenticate(key)).name == "bob"


async def test_a_key_cache_of_zero_seconds_reads_the_store_every_time(
    store: SQLiteStore, clock: ManualClock
) -> None:
    auth = Auth(store, clock, cache_seconds=0)
    issued = await auth.issue_key("carol", is_admin=False, label="test")
    assert (await auth.authenticate(issued.key)).name == "carol"
    assert await store.revoke_api_key(issued.record.id, clock.now())
    with pytest.raises(Unauthorized):
        await auth.authenticate(issued.key)


async def test_the_job_routes_endpoint_copy_is_read_again_once_it_is_a_second_old(
    services: Services, clock: ManualClock
) -> None:
    first = await services.endpoints.recent_copy("ep1")
    # Changed behind this replica's back (as another replica would): the copy stays a while.
    changed = first.spec.model_copy(update={"name": "renamed"})
    assert await services.store.update_endpoint("ep1", changed, bump_version=False) is not None
    clock.advance(RECENT_SECONDS - 0.001)
    assert (await services.endpoints.recent_copy("ep1")).spec.name == "ep1"
    clock.advance(0.001)
    assert (await services.endpoints.recent_copy("ep1")).spec.name == "renamed"


async def test_the_live_worker_count_is_counted_again_once_it_is_a_second_old(
    services: Services, clock: ManualClock
) -> None:
    await services.workers.add(idle_worker("w1", clock.now()))
    assert await services.workers.live_count("ep1") == 1
    await services.workers.add(idle_worker("w2", clock.now()))
    clock.advance(LIVE_COUNT_SECONDS - 0.001)
    assert await services.workers.live_count("ep1") == 1
    clock.advance(0.001)
    assert await services.workers.live_count("ep1") == 2


async def test_a_disabled_users_key_works_until_its_cached_caller_expires(
    store: SQLiteStore, clock: ManualClock
) -> None:
    auth = Auth(store, clock, cache_seconds=KEY_CACHE_SECONDS)
    issued = await auth.issue_key("dora", is_admin=False, label="test")
    caller = await auth.caller(issued.key)
    assert caller.permissions == ALL and caller.key_id == issued.record.id
    assert await store.set_user_disabled(issued.user.id, clock.now())
    clock.advance(KEY_CACHE_SECONDS - 0.001)
    assert (await auth.authenticate(issued.key)).name == "dora"
    clock.advance(0.001)
    with pytest.raises(Unauthorized, match="invalid or revoked"):
        await auth.authenticate(issued.key)
    # The console's sessions read the key now, not from the cache: theirs end at once.
    assert await auth.caller_of_digest(keys.hash_key(issued.key)) is None


async def test_a_key_is_refused_what_its_permissions_lack(
    store: SQLiteStore, clock: ManualClock
) -> None:
    auth = Auth(store, clock, cache_seconds=KEY_CACHE_SECONDS)
    user = await auth.ensure_user("eve", is_admin=False)
    issued = await auth.register_key(keys.new_api_key(), user, "ro", READ_ONLY)
    assert (await auth.authorize(issued.key, Access.READ, "ep1")).name == "eve"
    with pytest.raises(Unauthorized, match="lacks the permission read_write on endpoint ep1"):
        await auth.authorize(issued.key, Access.READ_WRITE, "ep1")
