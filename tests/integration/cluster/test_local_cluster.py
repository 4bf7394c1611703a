"""The single-replica cluster of the SQLite default: alone, always leading, nothing to send."""

from __future__ import annotations

from skiff.cluster import Cluster, LocalCluster


def _no_keys(keys: list[str]) -> None:
    raise AssertionError(f"a lone replica got keys {keys}")


def _no_loss() -> None:
    raise AssertionError("a lone replica lost coordination")


async def test_a_lone_replica_leads_and_knows_only_itself() -> None:
    cluster: Cluster = LocalCluster("http://127.0.0.1:8000")
    await cluster.start(_no_keys, _no_loss)
    assert cluster.max_wait is None
    assert cluster.leading
    assert await cluster.campaign()
    assert await cluster.peers() == {cluster.replica_id: "http://127.0.0.1:8000"}
    assert await cluster.hosts() == {cluster.replica_id: ("http://127.0.0.1:8000", [])}
    assert await cluster.leader() == (cluster.replica_id, "http://127.0.0.1:8000")
    cluster.publish("ep-1")  # nobody to tell, and no error
    await cluster.resign()
    await cluster.close()
    await cluster.close()


async def test_alive_knows_only_this_replica() -> None:
    cluster = LocalCluster("http://a")
    assert await cluster.alive([cluster.replica_id, "other", "gone"]) == {cluster.replica_id}
    assert await cluster.alive(iter(["other"])) == set()
    assert await cluster.alive([]) == set()


def test_every_start_gets_its_own_replica_id() -> None:
    ids = {LocalCluster("http://a").replica_id for _ in range(20)}
    assert len(ids) == 20
