"""PostgresCluster against a real server: every test gets fresh schemas in the ``test``
database (dropped afterwards) and is skipped when no server is reachable."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from eventually import eventually_async
from pgtest import PG_DSN, pg_admin, schema_name
from skiff.cluster import ClusterUnavailable, PostgresCluster
from skiff.store.postgres import migrate


@dataclass
class Probe:
    """Records what a cluster reports to its owner."""

    batches: list[list[str]] = field(default_factory=list)
    lost: int = 0
    #: Run at the moment of loss, to look at the cluster before it reconnects.
    when_lost: Callable[[], None] | None = None

    def on_keys(self, keys: list[str]) -> None:
        self.batches.append(keys)

    def on_lost(self) -> None:
        self.lost += 1
        if self.when_lost is not None:
            self.when_lost()

    @property
    def keys(self) -> list[str]:
        return [k for batch in self.batches for k in batch]


class Schemas:
    """Makes migrated schemas and drops them all at the end."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin
        self.made: list[str] = []

    async def make(self, negative: bool | None = None) -> str:
        """A fresh migrated schema; ``negative`` picks the sign of its lock namespace keys, so
        both oid mappings of pg_locks are exercised."""
        while True:
            name = schema_name()
            keys = await self.admin.fetchrow(
                "SELECT hashtext($1), hashtext($2)", f"skiff:{name}", f"skiff-replica:{name}"
            )
            if negative is None or all((k < 0) == negative for k in keys):
                break
        self.made.append(name)
        conn = await asyncpg.connect(PG_DSN, server_settings={"search_path": f'"{name}"'})
        try:
            await migrate(conn, name)
        finally:
            await conn.close()
        return name

    async def drop(self) -> None:
        for name in self.made:
            await self.admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
async def admin() -> AsyncIterator[Any]:
    conn = await pg_admin()
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def schemas(admin: Any) -> AsyncIterator[Schemas]:
    made = Schemas(admin)
    try:
        yield made
    finally:
        await made.drop()


@pytest.fixture
async def schema(schemas: Schemas) -> str:
    return await schemas.make()


Make = Callable[..., Awaitable[tuple[PostgresCluster, Probe]]]


@pytest.fixture
async def replica(schema: str) -> AsyncIterator[Make]:
    """Starts replicas (on ``schema`` unless told otherwise); closes them all afterwards."""
    started: list[PostgresCluster] = []

    async def make(
        url: str = "http://a",
        *,
        on: str | None = None,
        replica_id: str | None = None,
        addresses: tuple[str, ...] = (),
    ) -> tuple[PostgresCluster, Probe]:
        cluster = PostgresCluster(
            PG_DSN, on or schema, url, replica_id=replica_id, addresses=addresses
        )
        probe = Probe()
        await cluster.start(probe.on_keys, probe.on_lost)
        started.append(cluster)
        return cluster, probe

    try:
        yield make
    finally:
        for cluster in started:
            await cluster.close()


async def settle(sender: PostgresCluster, *probes: Probe) -> None:
    """Publish a marker from ``sender`` and wait until every probe has it: notifications reach a
    listener in commit order, so anything sent earlier has been delivered by then."""
    marker = f"marker-{secrets.token_hex(4)}"
    sender.publish(marker)

    await eventually_async(
        lambda: all(marker in p.keys for p in probes), f"every probe to get {marker}"
    )
    for p in probes:
        for batch in p.batches:
            if marker in batch:
                batch.remove(marker)
        p.batches[:] = [b for b in p.batches if b]


async def backend_pid(admin: Any, schema: str, cluster: PostgresCluster) -> int:
    session = await admin.fetchval(
        f'SELECT session FROM "{schema}".replicas WHERE id = $1', cluster.replica_id
    )
    return int(session)


# -- notifications -----------------------------------------------------------------------


async def test_a_published_key_reaches_the_other_replica_and_not_its_own(replica: Make) -> None:
    a, pa = await replica()
    b, pb = await replica()
    a.publish("ep-1")
    await eventually_async(lambda: pb.keys == ["ep-1"], "b to get the key a published")
    await settle(b, pa)
    assert pa.batches == []


async def test_keys_published_in_one_loop_iteration_go_in_one_deduplicated_batch(
    replica: Make,
) -> None:
    a, _ = await replica()
    _b, pb = await replica()
    for key in ["x", "y", "x", "z", "y", "x"]:
        a.publish(key)
    await settle(a, pb)
    assert pb.batches == [["x", "y", "z"]]


async def test_a_batch_too_big_for_one_notify_arrives_complete_in_order(replica: Make) -> None:
    a, _ = await replica()
    _b, pb = await replica()
    keys = [f"job-{i:05d}-{'k' * 24}" for i in range(600)]  # about 21 KB
    for key in keys:
        a.publish(key)
    await settle(a, pb)
    assert pb.keys == keys
    assert len(pb.batches) >= 3


async def test_a_failing_on_keys_callback_does_not_stop_delivery(
    replica: Make, schema: str
) -> None:
    a, _ = await replica()
    got: list[str] = []

    def flaky(keys: list[str]) -> None:
        got.extend(keys)
        raise RuntimeError("boom")

    b = PostgresCluster(PG_DSN, schema, "http://b")
    await b.start(flaky, lambda: None)
    try:
        a.publish("one")
        await eventually_async(lambda: "one" in got, "the key 'one'")
        a.publish("two")
        await eventually_async(lambda: "two" in got, "the key 'two'")
    finally:
        await b.close()


# -- leadership --------------------------------------------------------------------------


async def test_exactly_one_replica_leads(replica: Make) -> None:
    a, _ = await replica("http://a")
    b, _ = await replica("http://b")
    assert await a.leader() is None
    results = [await a.campaign(), await b.campaign(), await a.campaign(), await b.campaign()]
    assert results in ([True, False, True, False], [False, True, False, True])
    assert [a.leading, b.leading] == results[:2]
    winner = a if a.leading else b
    assert await a.leader() == await b.leader() == (winner.replica_id, winner.url)


async def test_resigning_hands_the_lead_to_the_next_campaigner(replica: Make) -> None:
    a, _ = await replica("http://a")
    b, _ = await replica("http://b")
    assert await a.campaign()
    assert not await b.campaign()
    await a.resign()
    assert not a.leading
    assert await b.campaign()
    assert not await a.campaign()
    assert await a.leader() == (b.replica_id, "http://b")


async def test_closing_the_leader_hands_the_lead_over_and_it_counts_as_dead(
    replica: Make, admin: Any, schema: str
) -> None:
    a, pa = await replica("http://a")
    b, _ = await replica("http://b")
    assert await a.campaign()
    assert await b.alive([a.replica_id, b.replica_id]) == {a.replica_id, b.replica_id}
    await a.close()
    await a.close()  # idempotent
    assert pa.lost == 0  # a deliberate close is no loss
    assert not a.leading
    assert await b.campaign()
    assert await b.alive([a.replica_id, b.replica_id]) == {b.replica_id}
    assert await b.peers() == {b.replica_id: "http://b"}
    assert await b.leader() == (b.replica_id, "http://b")
    rows = await admin.fetch(f'SELECT id FROM "{schema}".replicas')
    assert [r[0] for r in rows] == [b.replica_id]


async def test_a_killed_connection_loses_the_lead_and_comes_back_by_itself(
    replica: Make, admin: Any, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    a, pa = await replica("http://a")
    b, pb = await replica("http://b")
    assert await a.campaign()
    old_pid = await backend_pid(admin, schema, a)

    # What the cut-off replica does at the moment of loss, before it reconnects (it waits
    # 0.2 s first): it refuses to lead or to judge who is alive, and drops what it publishes.
    seen: dict[str, object] = {}

    async def while_down() -> None:
        seen["leading"] = a.leading
        seen["campaign"] = await a.campaign()
        a.publish("dropped")
        a.publish("dropped-too")
        with pytest.raises(ClusterUnavailable):
            await a.alive([b.replica_id])
        with pytest.raises(ClusterUnavailable):
            await a.leader()

    checks: list[asyncio.Task[None]] = []
    pa.when_lost = lambda: checks.append(asyncio.ensure_future(while_down()))

    await admin.execute("SELECT pg_terminate_backend($1)", old_pid)
    await eventually_async(lambda: pa.lost == 1, "a to report its lost connection")
    await asyncio.gather(*checks)
    assert seen == {"leading": False, "campaign": False}
    assert sum("dropping published keys" in r.getMessage() for r in caplog.records) == 1
    await eventually_async(b.campaign, "b to win the campaign")

    async def a_is_back() -> bool:
        try:
            await a.peers()
        except ClusterUnavailable:
            return False
        return await b.alive([a.replica_id]) == {a.replica_id}

    await eventually_async(a_is_back, "a to be back in the cluster")
    assert await a.peers() == {a.replica_id: "http://a", b.replica_id: "http://b"}
    assert await a.leader() == (b.replica_id, "http://b")
    assert not await a.campaign()
    assert await backend_pid(admin, schema, a) != old_pid
    assert pa.lost == 1
    # Notifications flow both ways again; the key published while down was dropped.
    await settle(b, pa)
    await settle(a, pb)
    assert not {"dropped", "dropped-too"} & set(pb.keys)


async def test_a_reconnecting_replica_ends_its_own_stale_session(
    replica: Make, admin: Any, schema: str
) -> None:
    a, pa = await replica()
    stale = await asyncpg.connect(PG_DSN)
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", await backend_pid(admin, schema, a))
        await eventually_async(lambda: pa.lost == 1, "a to report its lost connection")
        # Stand in for a's old session after a network drop the server has not noticed yet:
        # it still holds a's liveness lock and is the session a's row names.
        assert await stale.fetchval(
            "SELECT pg_try_advisory_lock(hashtext($1), hashtext($2))",
            f"skiff-replica:{schema}",
            a.replica_id,
        )
        await stale.execute(
            f'UPDATE "{schema}".replicas SET session = pg_backend_pid()::text WHERE id = $1',
            a.replica_id,
        )
        await eventually_async(stale.is_closed, "a to end its stale session")

        async def a_is_back() -> bool:
            try:
                return await a.peers() == {a.replica_id: "http://a"}
            except ClusterUnavailable:
                return False

        await eventually_async(a_is_back, "a to be back in the cluster")
    finally:
        await stale.close()


async def test_start_fails_when_the_database_is_unreachable() -> None:
    cluster = PostgresCluster("postgresql://postgres@127.0.0.1:1/test", None, "http://a")
    with pytest.raises(OSError):
        await cluster.start(lambda keys: None, lambda: None)
    assert not await cluster.campaign()
    with pytest.raises(ClusterUnavailable):
        await cluster.peers()
    await cluster.close()


async def test_the_leader_prunes_rows_of_replicas_that_are_gone(
    replica: Make, admin: Any, schema: str
) -> None:
    await admin.execute(
        f'INSERT INTO "{schema}".replicas VALUES ($1, $2, $3, $4, $5)',
        "ghost",
        "http://ghost",
        "elsewhere",
        1.0,
        "999999",
    )
    a, _ = await replica("http://a")
    assert await a.alive(["ghost"]) == set()
    assert await a.peers() == {a.replica_id: "http://a"}
    assert await a.campaign()
    rows = await admin.fetch(f'SELECT id FROM "{schema}".replicas')
    assert [r[0] for r in rows] == [a.replica_id]


# -- membership --------------------------------------------------------------------------


async def test_peers_and_leader_give_every_live_replica_with_its_url(replica: Make) -> None:
    a, _ = await replica("http://10.0.0.1:8000")
    b, _ = await replica("http://10.0.0.2:8000")
    expected = {a.replica_id: "http://10.0.0.1:8000", b.replica_id: "http://10.0.0.2:8000"}
    assert await a.peers() == await b.peers() == expected
    assert await b.campaign()
    assert await a.leader() == (b.replica_id, "http://10.0.0.2:8000")
    assert await a.alive([]) == set()
    assert await a.alive(iter([a.replica_id, a.replica_id, "nobody"])) == {a.replica_id}


async def test_hosts_give_every_live_replica_with_its_url_and_published_addresses(
    replica: Make,
) -> None:
    """What keeps one replica's webhooks from another's host (services/host_addresses.py)."""
    a, _ = await replica("http://10.0.0.1:8000", addresses=("10.0.0.1", "93.184.216.34"))
    b, _ = await replica("http://10.0.0.2:8000")
    expected = {
        a.replica_id: ("http://10.0.0.1:8000", ["10.0.0.1", "93.184.216.34"]),
        b.replica_id: ("http://10.0.0.2:8000", []),
    }
    assert await a.hosts() == await b.hosts() == expected
    await a.close()
    assert await b.hosts() == {b.replica_id: ("http://10.0.0.2:8000", [])}


async def test_a_replica_readdressed_is_seen_so_by_the_others_and_after_a_reconnect(
    replica: Make, admin: Any, schema: str
) -> None:
    """A host that gains an address after its replica started (services/host_addresses.py)."""
    a, pa = await replica("http://10.0.0.1:8000", addresses=("10.0.0.1",))
    b, _ = await replica("http://10.0.0.2:8000")
    await a.readdress(["10.0.0.1", "93.184.216.34"])
    assert (await b.hosts())[a.replica_id] == (
        "http://10.0.0.1:8000",
        ["10.0.0.1", "93.184.216.34"],
    )
    await a.readdress([])
    assert (await b.hosts())[a.replica_id] == ("http://10.0.0.1:8000", [])
    assert await b.peers() == {
        a.replica_id: "http://10.0.0.1:8000",
        b.replica_id: "http://10.0.0.2:8000",
    }

    # Readdressed while its connection is down: the newest list is what it registers again.
    await admin.execute("SELECT pg_terminate_backend($1)", await backend_pid(admin, schema, a))
    await eventually_async(lambda: pa.lost == 1, "a to report its lost connection")
    with contextlib.suppress(ClusterUnavailable):
        await a.readdress(["10.0.0.9"])

    async def back_with_the_newest() -> bool:
        return (await b.hosts()).get(a.replica_id) == ("http://10.0.0.1:8000", ["10.0.0.9"])

    await eventually_async(back_with_the_newest, "a to be back with its newest addresses")


async def test_replica_ids_and_namespaces_hashing_negative_or_positive_work(
    replica: Make, admin: Any, schemas: Schemas
) -> None:
    async def id_hashing(negative: bool) -> str:
        while True:
            candidate = secrets.token_hex(6)
            if (await admin.fetchval("SELECT hashtext($1)", candidate) < 0) == negative:
                return candidate

    for negative in (True, False):
        on = await schemas.make(negative=negative)
        neg, _ = await replica("http://neg", on=on, replica_id=await id_hashing(True))
        pos, _ = await replica("http://pos", on=on, replica_id=await id_hashing(False))
        ids = [neg.replica_id, pos.replica_id, "nobody"]
        assert await pos.alive(ids) == await neg.alive(ids) == {neg.replica_id, pos.replica_id}
        assert await pos.peers() == {neg.replica_id: "http://neg", pos.replica_id: "http://pos"}
        assert await neg.campaign()
        assert await pos.leader() == (neg.replica_id, "http://neg")
        await neg.close()
        assert await pos.alive(ids) == {pos.replica_id}


async def test_a_replica_id_already_alive_is_refused(replica: Make, schema: str) -> None:
    a, _ = await replica()
    twin = PostgresCluster(PG_DSN, schema, "http://twin", replica_id=a.replica_id)
    with pytest.raises(ClusterUnavailable, match="in use"):
        await twin.start(lambda keys: None, lambda: None)
    await twin.close()
    assert await a.peers() == {a.replica_id: "http://a"}


async def test_schemas_share_neither_leadership_nor_notifications(
    replica: Make, schemas: Schemas
) -> None:
    other = await schemas.make()
    a, _ = await replica("http://a")
    a2, pa2 = await replica("http://a2")
    c, pc = await replica("http://c", on=other)
    c2, _ = await replica("http://c2", on=other)
    assert await a.campaign()
    assert await c.campaign()
    assert await a.leader() == (a.replica_id, "http://a")
    assert await c.leader() == (c.replica_id, "http://c")
    assert await a.peers() == {a.replica_id: "http://a", a2.replica_id: "http://a2"}
    assert await c.alive([a.replica_id, c2.replica_id]) == {c2.replica_id}
    a.publish("only-here")
    await settle(a, pa2)  # a's key has been delivered to everyone listening on its channel
    await settle(c2, pc)
    assert pa2.keys == ["only-here"]
    assert pc.keys == []
