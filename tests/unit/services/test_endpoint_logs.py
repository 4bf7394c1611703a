"""EndpointLogs: an endpoint's lines gathered from every replica, and a follow served where the
workers run (other replicas faked; this replica's files real)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest

from skiff.cluster.base import Cluster
from skiff.domain.logs import LogLine, LogQuery, iso, stamp
from skiff.errors import BadGateway, NotFound, TooManyRequests, Unauthorized
from skiff.services import logs as logs_module
from skiff.services.follow_slots import FollowSlots
from skiff.services.logs import EndpointLogs, Relayed, WorkerLogs
from skiff.services.peer_logs import LOCAL_HEADER, PeerLogs
from skiff.services.wakeups import Wakeups
from skiff.store.base import Store

T0 = 1_800_000_000.0


def write(path: Path, *lines: tuple[float, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        for ts, text in lines:
            f.write(stamp(ts) + text.encode() + b"\n")


class FakePeers:
    """The other replicas: their lines, and the leader when it is one of them."""

    def __init__(self, lines: list[LogLine] | None = None, leader: str | None = None) -> None:
        self._lines = lines or []
        self._leader = leader
        self.asked: list[tuple[Any, ...]] = []

    async def lines(self, query: LogQuery, authorization: str | None) -> list[LogLine]:
        q = query
        self.asked.append((q.endpoint_id, q.worker, q.since, q.tail, authorization))
        return [x for x in self._lines if q.worker is None or x.worker == q.worker]

    async def leader_url(self) -> str | None:
        return self._leader

    async def follow(
        self, url: str, query: LogQuery, authorization: str | None
    ) -> AsyncIterator[bytes]:
        q = query
        self.asked.append((url, q.endpoint_id, q.worker, q.since, q.tail, authorization))

        async def chunks() -> AsyncIterator[bytes]:
            yield b"from the leader\n"

        return chunks()


class FakeStore:
    def __init__(self) -> None:
        self.endpoints = {"ep1"}

    async def get_endpoint(self, endpoint_id: str) -> object | None:
        return object() if endpoint_id in self.endpoints else None


def endpoint_logs(
    tmp_path: Path,
    peers: FakePeers,
    store: FakeStore | None = None,
    slots: FollowSlots | None = None,
) -> EndpointLogs:
    write(tmp_path / "logs" / "ep1" / "a.log", (T0 + 0, "a0"), (T0 + 2, "a2"), (T0 + 4, "a4"))
    return EndpointLogs(
        WorkerLogs(tmp_path),
        cast(PeerLogs, peers),
        cast(Store, store or FakeStore()),
        Wakeups(),
        slots,
    )


async def test_the_lines_of_every_replica_are_merged_by_time(tmp_path: Path) -> None:
    peers = FakePeers([LogLine("b", T0 + 1, "b1"), LogLine("b", T0 + 3, "b3")])
    logs = endpoint_logs(tmp_path, peers)
    lines = await logs.lines(
        LogQuery("ep1", None, None, 4), local_only=False, credentials="Bearer k"
    )
    assert [x.line for x in lines] == ["b1", "a2", "b3", "a4"]
    # The others are asked the same question, as the caller.
    assert peers.asked == [("ep1", None, None, 4, "Bearer k")]


async def test_asked_by_another_replica_it_answers_alone(tmp_path: Path) -> None:
    peers = FakePeers([LogLine("b", T0 + 1, "b1")])
    logs = endpoint_logs(tmp_path, peers)
    lines = await logs.lines(LogQuery("ep1", None, T0 + 1, 10), local_only=True, credentials=None)
    assert [x.line for x in lines] == ["a2", "a4"]
    assert peers.asked == []


async def test_a_worker_is_found_on_whichever_replica_holds_its_log(tmp_path: Path) -> None:
    logs = endpoint_logs(tmp_path, FakePeers([LogLine("b", T0 + 1, "b1")]))
    lines = await logs.lines(LogQuery("ep1", "b", None, 10), local_only=False, credentials=None)
    assert [x.line for x in lines] == ["b1"]
    with pytest.raises(NotFound, match="worker nobody has no log on endpoint ep1"):
        await logs.lines(LogQuery("ep1", "nobody", None, 10), local_only=False, credentials=None)


async def test_a_follow_is_relayed_from_the_leader_when_another_replica_leads(
    tmp_path: Path,
) -> None:
    peers = FakePeers(leader="http://leader:8000")
    logs = endpoint_logs(tmp_path, peers)
    followed = await logs.follow(
        "u1", LogQuery("ep1", "a", T0, 5), local_only=False, credentials="k"
    )
    assert isinstance(followed, Relayed)
    assert [chunk async for chunk in followed.chunks] == [b"from the leader\n"]
    assert peers.asked == [("http://leader:8000", "ep1", "a", T0, 5, "k")]
    # Asked on another's behalf, it follows its own files, and knows only its own workers.
    local = await logs.follow(
        "u1", LogQuery("ep1", None, None, 5), local_only=True, credentials=None
    )
    assert not isinstance(local, Relayed)
    await local.aclose()
    with pytest.raises(NotFound):
        await logs.follow("u1", LogQuery("ep1", "b", None, 5), local_only=True, credentials=None)


async def test_a_local_follow_sends_the_backlog_new_lines_and_ends_with_its_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_module, "FOLLOW_POLL_SECONDS", 0.01)
    store = FakeStore()
    logs = endpoint_logs(tmp_path, FakePeers(), store)
    followed = await logs.follow(
        "u1", LogQuery("ep1", None, T0 + 1, 1), local_only=False, credentials=None
    )
    assert not isinstance(followed, Relayed)
    batches = aiter(followed)
    assert [x.line for x in await anext(batches)] == ["a4"]
    write(tmp_path / "logs" / "ep1" / "a.log", (T0, "too old for since"), (T0 + 5, "a5"))
    assert [x.line for x in await anext(batches)] == ["a5"]
    # Once the endpoint is gone, its last lines are read and the follow ends.
    store.endpoints.clear()
    write(tmp_path / "logs" / "ep1" / "c.log", (T0 + 6, "c6"))
    rest = [batch async for batch in batches]
    assert [x.line for batch in rest for x in batch] == ["c6"]


async def test_a_follow_ends_at_once_when_its_reader_may_no_longer_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_module, "FOLLOW_POLL_SECONDS", 0.01)
    monkeypatch.setattr(logs_module, "FOLLOW_EXISTS_EVERY", 1)  # asked at every poll
    allowed = {"now": True}

    async def still_allowed() -> bool:
        return allowed["now"]

    logs = endpoint_logs(tmp_path, FakePeers())
    followed = await logs.follow(
        "u1",
        LogQuery("ep1", None, T0 + 1, 1),
        local_only=False,
        credentials=None,
        still_allowed=still_allowed,
    )
    assert not isinstance(followed, Relayed)
    batches = aiter(followed)
    assert [x.line for x in await anext(batches)] == ["a4"]
    write(tmp_path / "logs" / "ep1" / "a.log", (T0 + 5, "a5"))
    assert [x.line for x in await anext(batches)] == ["a5"]
    # The key is revoked: what is written after is not sent, and the follow ends.
    allowed["now"] = False
    write(tmp_path / "logs" / "ep1" / "a.log", (T0 + 6, "a secret printed after"))
    rest = [batch async for batch in batches]
    assert all(x.line != "a secret printed after" for batch in rest for x in batch)


async def test_a_quiet_follow_sends_empty_batches_and_opens_with_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_module, "FOLLOW_POLL_SECONDS", 0.01)
    monkeypatch.setattr(logs_module, "FOLLOW_KEEPALIVE_SECONDS", 0.0)
    logs = endpoint_logs(tmp_path, FakePeers())
    followed = await logs.follow(
        "u1", LogQuery("ep1", None, T0 + 10, 5), local_only=False, credentials=None
    )
    assert not isinstance(followed, Relayed)
    assert await anext(followed) == []
    assert await asyncio.wait_for(anext(followed), 5) == []
    await followed.aclose()


class OneOtherReplica:
    replica_id = "r1"

    async def peers(self) -> dict[str, str]:
        return {"r1": "http://me", "r2": "http://other"}


async def test_other_replicas_are_asked_as_the_caller_and_their_lines_read_back() -> None:
    seen: list[httpx.Request] = []
    line = {"worker": "b", "time": "2027-01-15T08:00:01.007Z", "line": "hello"}

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=orjson.dumps({"lines": [line]}))

    peers = PeerLogs(cast(Cluster, OneOtherReplica()))
    peers._client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    try:
        found = await peers.lines(LogQuery("ep1", "b", T0 + 0.25, 7), "Bearer k")
    finally:
        await peers.aclose()
    assert [(x.worker, x.line) for x in found] == [("b", "hello")]
    assert found[0].time is not None and iso(found[0].time) == line["time"]
    (request,) = seen
    assert request.url.path == "/v1/endpoints/ep1/logs"
    assert dict(request.url.params) == {"worker": "b", "since": repr(T0 + 0.25), "tail": "7"}
    assert request.headers["authorization"] == "Bearer k"
    assert request.headers[LOCAL_HEADER] == "1"


async def test_a_followed_log_is_streamed_from_the_leader_as_the_caller() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b'{"worker": "a"}\n\n')

    peers = PeerLogs(cast(Cluster, OneOtherReplica()))
    peers._follow_client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    try:
        followed = await peers.follow("http://other", LogQuery("ep1", None, None, 3), "k")
        chunks = [c async for c in followed]
    finally:
        await peers.aclose()
    assert b"".join(chunks) == b'{"worker": "a"}\n\n'
    (request,) = seen
    assert str(request.url) == "http://other/v1/endpoints/ep1/logs?tail=3&follow=true"
    assert request.headers["authorization"] == "k"
    assert request.headers[LOCAL_HEADER] == "1"


@pytest.mark.parametrize(
    ("status", "body", "raised", "says"),
    [
        (404, b'{"message": "endpoint ep1 not found"}', NotFound, "endpoint ep1 not found"),
        (401, b'{"message": "invalid API key"}', Unauthorized, "invalid API key"),
        (429, b'{"message": "this user follows 16 logs"}', TooManyRequests, "follows 16"),
        (500, b"internal", BadGateway, "answered 500"),
    ],
)
async def test_the_leaders_refusal_of_a_follow_is_the_callers_answer(
    status: int, body: bytes, raised: type[Exception], says: str
) -> None:
    """Opened before the caller's answer begins: a refusal is not streamed as lines."""
    peers = PeerLogs(cast(Cluster, OneOtherReplica()))
    peers._follow_client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _r: httpx.Response(status, content=body))
    )
    try:
        with pytest.raises(raised, match=says):
            await peers.follow("http://other", LogQuery("ep1", None, None, 3), "k")
    finally:
        await peers.aclose()


async def test_a_user_holds_so_many_follows_and_each_ended_one_frees_its_slot(
    tmp_path: Path,
) -> None:
    """Local and relayed follows alike; one dropped unread frees its slot as well (a reader
    gone before its first line)."""
    slots = FollowSlots(most=2)
    logs = endpoint_logs(tmp_path, FakePeers(leader="http://leader:8000"), slots=slots)
    query = LogQuery("ep1", None, None, 5)
    first = await logs.follow("u1", query, local_only=True, credentials=None)
    second = await logs.follow("u1", query, local_only=False, credentials="k")
    with pytest.raises(TooManyRequests, match="follows 2 logs on this server already"):
        await logs.follow("u1", query, local_only=True, credentials=None)
    # Another user's follows are their own.
    theirs = await logs.follow("u2", query, local_only=True, credentials=None)
    assert not isinstance(first, Relayed) and isinstance(second, Relayed)
    await first.aclose()
    third = await logs.follow("u1", query, local_only=True, credentials=None)
    assert [chunk async for chunk in second.chunks] == [b"from the leader\n"]
    fourth = await logs.follow("u1", query, local_only=True, credentials=None)
    del fourth  # dropped unread: its slot is let go on the loop's next turn
    await asyncio.sleep(0)
    fifth = await logs.follow("u1", query, local_only=True, credentials=None)
    assert slots.open_of("u1") == 2
    for held in (third, fifth, theirs):
        assert not isinstance(held, Relayed)
        await held.aclose()
    assert slots.open_of("u1") == slots.open_of("u2") == 0
