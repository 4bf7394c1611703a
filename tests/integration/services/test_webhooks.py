"""Job-completion webhooks end to end inside one process: a real SQLite store makes the delivery
when a job becomes final, the sender POSTs it to a real local HTTP receiver, and the injected
clock decides when a failed delivery is due again."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import standardwebhooks
from aiohttp import web

from eventually import eventually_async
from name_server import serving
from skiff.api import management
from skiff.app import build_services, open_cluster
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import Job, JobStatus
from skiff.secret_keys import KeyFile
from skiff.services import webhooks as webhooks_module
from skiff.services.host_addresses import HostAddresses
from skiff.services.job_events import JobEvents
from skiff.services.wakeups import Wakeups
from skiff.services.webhooks import NameLookups, Slots, WebhookSender
from skiff.store.base import User, WebhookDelivery
from skiff.store.rows import webhook_delivery_from_row
from skiff.store.sqlite import SQLiteStore

LEASE = 30.0


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A local HTTP server that records every request and answers ``status``."""

    url: str
    status: int = 200
    #: Answer only once ``release`` is set (the fixture sets it at the end).
    hold: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    requests: list[Received] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(Received(dict(request.headers), await request.read()))
        self.arrived.set()
        if self.hold:
            await self.release.wait()
        if self.status in (301, 302, 307, 308):
            raise web.HTTPFound("/elsewhere")
        return web.Response(status=self.status, text="ok")


@contextlib.asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    """A receiver served on a port of its own, until the end (a held answer is let go)."""
    recv = Receiver(url="")
    app = web.Application()
    app.router.add_post("/hook", recv.handle)
    app.router.add_post("/elsewhere", recv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    recv.url = f"http://{host}:{port}/hook?source=skiff"
    try:
        yield recv
    finally:
        recv.release.set()
        await runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with receiving() as recv:
        yield recv


@dataclass
class Rig:
    path: Path
    store: SQLiteStore
    clock: ManualClock
    endpoint: Endpoint
    seq: int = 0
    senders: list[WebhookSender] = field(default_factory=list)

    def sender(self, **kwargs: Any) -> WebhookSender:
        kwargs.setdefault("allow_private", True)
        kwargs.setdefault("timeout", 5.0)
        sender = WebhookSender(self.store, self.clock, **kwargs)
        self.senders.append(sender)
        return sender

    async def close(self) -> None:
        for sender in self.senders:
            await sender.aclose()
        await self.store.close()

    async def queued(self, webhook: str | None, **fields: Any) -> Job:
        self.seq += 1
        job = Job(
            id=f"job-{self.seq}",
            endpoint_id=self.endpoint.id,
            status=JobStatus.IN_QUEUE,
            input_json=orjson.dumps({"prompt": "hi", "n": self.seq}).decode(),
            execution_timeout_ms=60_000,
            ttl_ms=86_400_000,
            low_priority=False,
            webhook=webhook,
            s3_config_json=orjson.dumps(
                {"accessId": "A", "accessSecret": "S3CRET", "bucketName": "b", "endpointUrl": "e"}
            ).decode(),
            submitted_at=self.clock.now(),
            **fields,
        )
        await self.store.insert_job(job)
        return job

    async def running(self, webhook: str | None) -> Job:
        job = await self.queued(webhook)
        now = self.clock.now()
        claimed = await self.store.claim_jobs(self.endpoint.id, "w1", 1, now, now + LEASE)
        assert [j.id for j in claimed] == [job.id]
        return job

    async def final(self, webhook: str | None, status: JobStatus = JobStatus.COMPLETED) -> Job:
        """A job with ``webhook`` brought to ``status`` the way the server does it."""
        if status is JobStatus.CANCELLED:
            job = await self.queued(webhook)
            done = await self.store.cancel_job(self.endpoint.id, job.id, self.clock.now())
        elif status is JobStatus.TIMED_OUT:
            job = await self.running(webhook)
            self.clock.advance(60.0)
            timed_out = await self.store.time_out_jobs(self.clock.now())
            done = timed_out[0] if timed_out else None
        else:
            job = await self.running(webhook)
            self.clock.advance(1.5)
            output = '{"answer": 42}' if status is JobStatus.COMPLETED else None
            error = "handler raised ValueError" if status is JobStatus.FAILED else None
            done = await self.store.finish_job(
                job.id, "w1", status, output, error, self.clock.now()
            )
        assert done is not None and done.status is status
        return done

    def deliveries(self, job_id: str) -> list[WebhookDelivery]:
        """The job's stored deliveries, read from the database file itself: the server reads a
        delivery only while it is due (``due_webhook_deliveries``), and these tests also look
        at delivered and failed ones."""
        with contextlib.closing(sqlite3.connect(self.path)) as conn:
            conn.row_factory = sqlite3.Row
            rows = conn.execute(
                "SELECT d.*, u.webhook_secret AS secret"
                " FROM webhook_deliveries d LEFT JOIN users u ON u.id = d.user_id"
                " WHERE d.job_id = ? ORDER BY d.created_at",
                (job_id,),
            ).fetchall()
        return [webhook_delivery_from_row(row) for row in rows]

    async def delivery(self, job_id: str) -> WebhookDelivery:
        deliveries = self.deliveries(job_id)
        assert len(deliveries) == 1
        return deliveries[0]


async def open_rig(path: Path, clock: ManualClock) -> Rig:
    # The key file beside the database: a rig opened again reads what it sealed before.
    store = SQLiteStore(path, KeyFile(path.with_name("secret.key")))
    await store.open()
    endpoint = Endpoint(
        id="ep1",
        userId="u1",
        version=1,
        createdAt=clock.now(),
        spec=EndpointSpec(name="ep", templateId="t1"),
    )
    if await store.get_endpoint("ep1") is None:
        await store.create_user(User(id="u1", name="alice", is_admin=False, created_at=0.0))
        await store.create_endpoint(endpoint)
    return Rig(path, store, clock, endpoint)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    # Standard Webhooks receivers refuse timestamps more than 5 minutes from their own clock.
    r = await open_rig(tmp_path / "skiff.db", ManualClock(start=time.time()))
    yield r
    await r.close()


def verify(secret: str, request: Received) -> Any:
    return standardwebhooks.Webhook(secret).verify(request.body, request.headers)


async def test_a_receiver_answering_200_gets_one_signed_post_and_the_delivery_is_delivered(
    rig: Rig, receiver: Receiver
) -> None:
    job = await rig.final(receiver.url)
    assert await rig.sender().pass_once() == 1

    assert len(receiver.requests) == 1
    request = receiver.requests[0]
    secret = await rig.store.webhook_secret("u1")
    assert secret.startswith("whsec_")
    body = verify(secret, request)
    assert body["id"] == job.id
    assert body["status"] == "COMPLETED"
    assert body["output"] == {"answer": 42}
    assert body["input"] == {"prompt": "hi", "n": 1}
    assert body["webhook"] == receiver.url
    assert body["executionTime"] == 1500
    assert "s3Config" not in body and b"S3CRET" not in request.body

    delivery = await rig.delivery(job.id)
    assert request.headers["webhook-id"] == delivery.id
    assert request.headers["webhook-timestamp"] == str(int(rig.clock.now()))
    assert request.headers["webhook-signature"].startswith("v1,")
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == "skiff-webhooks/0.1"
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("delivered", 1, None)
    assert delivery.finished_at == rig.clock.now()

    assert await rig.sender().pass_once() == 0
    assert len(receiver.requests) == 1


async def test_a_signature_made_with_another_secret_is_rejected_by_the_receiver(
    rig: Rig, receiver: Receiver
) -> None:
    await rig.final(receiver.url)
    await rig.sender().pass_once()
    other = standardwebhooks.Webhook("whsec_" + "QUJD" * 11)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        other.verify(receiver.requests[0].body, receiver.requests[0].headers)


async def test_a_receiver_answering_500_is_tried_3_times_10_s_apart_then_failed(
    rig: Rig, receiver: Receiver
) -> None:
    receiver.status = 500
    job = await rig.final(receiver.url)
    sender = rig.sender()
    start = rig.clock.now()

    assert await sender.pass_once() == 1
    first = await rig.delivery(job.id)
    assert (first.status, first.attempts, first.last_error) == ("pending", 1, "HTTP 500")
    assert first.next_attempt_at == start + 10.0

    for attempt in (2, 3):
        rig.clock.advance(9.9)
        assert await sender.pass_once() == 0, "due again only 10 s after the last attempt"
        rig.clock.advance(0.1)
        assert await sender.pass_once() == 1
        assert (await rig.delivery(job.id)).attempts == attempt

    last = await rig.delivery(job.id)
    assert (last.status, last.attempts, last.last_error) == ("failed", 3, "HTTP 500")
    assert last.finished_at == start + 20.0
    rig.clock.advance(3600.0)
    assert await sender.pass_once() == 0
    assert len(receiver.requests) == 3
    ids = {r.headers["webhook-id"] for r in receiver.requests}
    assert ids == {last.id}, "every attempt carries the same webhook-id"
    stamps = [int(r.headers["webhook-timestamp"]) for r in receiver.requests]
    assert stamps == [int(start), int(start + 10.0), int(start + 20.0)]


async def test_a_delivery_that_fails_once_is_delivered_by_its_second_attempt(
    rig: Rig, receiver: Receiver
) -> None:
    receiver.status = 503
    job = await rig.final(receiver.url)
    sender = rig.sender()
    await sender.pass_once()
    receiver.status = 200
    rig.clock.advance(10.0)
    assert await sender.pass_once() == 1
    delivery = await rig.delivery(job.id)
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("delivered", 2, None)


async def test_a_delivery_stored_before_a_restart_is_delivered_after_it(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = ManualClock(start=time.time())
    before = await open_rig(tmp_path / "skiff.db", clock)
    job = await before.final(receiver.url)
    await before.close()  # the server stops before any attempt

    after = await open_rig(tmp_path / "skiff.db", clock)
    try:
        assert await after.sender().pass_once() == 1
        delivery = await after.delivery(job.id)
        assert delivery.status == "delivered"
        assert verify(await after.store.webhook_secret("u1"), receiver.requests[0])["id"] == job.id
    finally:
        await after.close()


async def test_a_pending_retry_survives_a_restart_with_its_attempt_count(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = ManualClock(start=time.time())
    before = await open_rig(tmp_path / "skiff.db", clock)
    receiver.status = 500
    job = await before.final(receiver.url)
    await before.sender().pass_once()
    await before.sender().pass_once()  # not due yet: still one attempt
    await before.close()

    after = await open_rig(tmp_path / "skiff.db", clock)
    try:
        sender = after.sender()
        assert await sender.pass_once() == 0
        clock.advance(10.0)
        assert await sender.pass_once() == 1
        clock.advance(10.0)
        assert await sender.pass_once() == 1
        delivery = await after.delivery(job.id)
        assert (delivery.status, delivery.attempts) == ("failed", 3)
        assert len(receiver.requests) == 3
    finally:
        await after.close()


@pytest.mark.parametrize(
    "status",
    [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT],
)
async def test_every_final_state_gets_a_delivery_with_its_status(
    rig: Rig, receiver: Receiver, status: JobStatus
) -> None:
    job = await rig.final(receiver.url, status)
    assert (await rig.delivery(job.id)).status == "pending"
    assert await rig.sender().pass_once() == 1
    body = verify(await rig.store.webhook_secret("u1"), receiver.requests[0])
    assert body["id"] == job.id and body["status"] == status.value
    assert body["input"] == {"prompt": "hi", "n": 1}
    if status in (JobStatus.FAILED, JobStatus.TIMED_OUT):
        assert body["error"]
    assert (await rig.delivery(job.id)).status == "delivered"


async def test_a_job_without_a_webhook_gets_no_delivery(rig: Rig, receiver: Receiver) -> None:
    job = await rig.final(None)
    assert rig.deliveries(job.id) == []
    assert await rig.sender().pass_once() == 0
    assert receiver.requests == []


async def test_a_refused_connection_is_recorded_and_tried_again(rig: Rig) -> None:
    closed = await unused_port()
    job = await rig.final(f"http://127.0.0.1:{closed}/hook")
    assert await rig.sender().pass_once() == 1
    delivery = await rig.delivery(job.id)
    assert delivery.status == "pending" and delivery.attempts == 1
    assert delivery.last_error is not None and delivery.last_error.startswith("could not connect")


async def test_a_receiver_slower_than_the_timeout_counts_as_a_failed_attempt(
    rig: Rig, receiver: Receiver
) -> None:
    receiver.hold = True
    job = await rig.final(receiver.url)
    assert await rig.sender(timeout=0.2).pass_once() == 1
    delivery = await rig.delivery(job.id)
    assert (delivery.status, delivery.last_error) == ("pending", "timed out")


async def test_a_redirect_is_not_followed_and_counts_as_a_failed_attempt(
    rig: Rig, receiver: Receiver
) -> None:
    receiver.status = 302
    job = await rig.final(receiver.url)
    await rig.sender().pass_once()
    assert len(receiver.requests) == 1
    delivery = await rig.delivery(job.id)
    assert delivery.last_error == "HTTP 302 (redirects are not followed)"


async def test_a_loopback_webhook_is_not_posted_unless_private_addresses_are_allowed(
    rig: Rig, receiver: Receiver
) -> None:
    job = await rig.final(receiver.url)
    assert await rig.sender(allow_private=False).pass_once() == 1
    assert receiver.requests == []
    delivery = await rig.delivery(job.id)
    assert delivery.status == "pending"
    assert delivery.last_error is not None
    assert "loopback" in delivery.last_error
    assert "SKIFF_WEBHOOK_ALLOW_PRIVATE=true" in delivery.last_error


async def test_a_delivery_to_an_address_of_this_host_is_not_attempted(rig: Rig) -> None:
    """A public address on one of this host's interfaces (given: this machine has none) is
    refused when the delivery comes due as when the job named it: no connection is made."""
    ours = "93.184.216.34"
    job = await rig.final(f"http://{ours}:9/hook")
    this_host = HostAddresses(rig.clock.now, lambda: frozenset({ipaddress.ip_address(ours)}))
    assert await rig.sender(allow_private=False, this_host=this_host).pass_once() == 1
    delivery = await rig.delivery(job.id)
    assert delivery.status == "pending"
    assert delivery.last_error is not None
    assert f"{ours} is an address of this server" in delivery.last_error


async def test_one_bad_delivery_does_not_stop_the_others_in_a_pass(
    rig: Rig, receiver: Receiver
) -> None:
    bad = await rig.final(f"http://127.0.0.1:{await unused_port()}/hook")
    broken = await rig.final("http://[::1")  # cannot even be parsed
    good = await rig.final(receiver.url)
    assert await rig.sender().pass_once() == 3
    assert (await rig.delivery(good.id)).status == "delivered"
    assert (await rig.delivery(bad.id)).status == "pending"
    unparsable = await rig.delivery(broken.id)
    assert unparsable.status == "pending"
    assert unparsable.last_error == "webhook must be an absolute http(s) URL"


def count_passes(sender: WebhookSender, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What each of the running sender's looks for due deliveries started, in order."""
    passes: list[int] = []
    original = sender.fill

    async def counted(slots: Slots) -> int:
        started = await original(slots)
        passes.append(started)
        return started

    monkeypatch.setattr(sender, "fill", counted)
    return passes


async def test_run_delivers_as_soon_as_it_is_woken(
    rig: Rig, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhooks_module, "IDLE_SECONDS", 60.0)
    sender = rig.sender()
    passes = count_passes(sender, monkeypatch)
    task = asyncio.create_task(sender.run())
    try:
        # The first pass finds nothing; the loop idles for a minute.
        await eventually_async(lambda: passes == [0], "the first pass, finding nothing")
        await rig.final(receiver.url)
        sender.wake()
        async with asyncio.timeout(5.0):
            await receiver.arrived.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_users_slow_receivers_hold_their_own_share_of_slots_not_everyones(
    rig: Rig, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alice's receiver never answers within the test; Bob's answers at once. Alice's
    deliveries take at most her share of the slots (one of four here), and Bob's delivery,
    due while hers hang, is attempted in a free slot at once, not after her pass."""
    monkeypatch.setattr(webhooks_module, "IDLE_SECONDS", 60.0)
    receiver.hold = True
    hers = [await rig.final(receiver.url) for _ in range(5)]
    bob = Rig(rig.path, rig.store, rig.clock, await _endpoint_of(rig, "u2", "ep2"), seq=1000)
    sender = rig.sender(concurrency=4, timeout=60.0)
    task = asyncio.create_task(sender.run())
    async with receiving() as his:
        try:
            async with asyncio.timeout(5.0):
                await receiver.arrived.wait()
            sender.wake()
            await asyncio.sleep(0.2)
            assert len(receiver.requests) == 1  # her share: 4 slots // 4
            his_job = await bob.final(his.url)
            sender.wake()
            async with asyncio.timeout(5.0):
                await his.arrived.wait()
            await eventually_async(
                lambda: rig.deliveries(his_job.id)[0].status == "delivered", "Bob's delivered"
            )
            assert all(rig.deliveries(j.id)[0].status == "pending" for j in hers)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _endpoint_of(rig: Rig, user_id: str, endpoint_id: str) -> Endpoint:
    await rig.store.create_user(User(id=user_id, name=user_id, is_admin=False, created_at=0.0))
    endpoint = Endpoint(
        id=endpoint_id,
        userId=user_id,
        version=1,
        createdAt=rig.clock.now(),
        spec=EndpointSpec(name=endpoint_id, templateId="t1"),
    )
    await rig.store.create_endpoint(endpoint)
    return endpoint


async def test_a_job_that_becomes_final_with_a_webhook_is_delivered_at_once(
    rig: Rig, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender subscribes to the job events, as ``Services.build`` wires it: a finished job
    does not wait out the sender's idle period."""
    monkeypatch.setattr(webhooks_module, "IDLE_SECONDS", 60.0)
    sender = rig.sender()
    events = JobEvents(Wakeups())
    events.on_final(sender.job_finished)
    passes = count_passes(sender, monkeypatch)
    task = asyncio.create_task(sender.run())
    try:
        # The first pass finds nothing; the loop idles for a minute.
        await eventually_async(lambda: passes == [0], "the first pass, finding nothing")
        events.finished(await rig.final(receiver.url))
        async with asyncio.timeout(5.0):
            await receiver.arrived.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_rotating_the_secret_signs_the_next_attempt_with_the_new_one(
    rig: Rig, receiver: Receiver
) -> None:
    sender = rig.sender()
    old = await sender.secret("u1")
    assert await sender.secret("u1") == old
    receiver.status = 500
    await rig.final(receiver.url)
    await sender.pass_once()
    new = await sender.rotate_secret("u1")
    assert new != old and new.startswith("whsec_")
    receiver.status = 200
    rig.clock.advance(10.0)
    await sender.pass_once()
    verify(old, receiver.requests[0])
    verify(new, receiver.requests[1])
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verify(old, receiver.requests[1])


# -- the request that leaves: pinned to the address that was checked -------------------------


def recording_transport(
    seen: list[httpx.Request], status: int = 200
) -> Callable[[], httpx.AsyncClient]:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status)

    return lambda: httpx.AsyncClient(transport=httpx.MockTransport(handler))


def table_resolver(answers: dict[str, list[str]]) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolve(host: str, port: int) -> list[str]:
        return answers[host]

    return resolve


async def test_a_public_name_is_posted_to_the_checked_address_with_its_name_as_host(
    rig: Rig,
) -> None:
    seen: list[httpx.Request] = []
    job = await rig.final("https://hooks.example.com:8443/done?x=1")
    sender = rig.sender(
        client=recording_transport(seen),
        allow_private=False,
        resolve=table_resolver({"hooks.example.com": ["93.184.216.34"]}),
    )
    assert await sender.pass_once() == 1
    [request] = seen
    assert str(request.url) == "https://93.184.216.34:8443/done?x=1"
    assert request.headers["Host"] == "hooks.example.com:8443"
    assert request.extensions["sni_hostname"] == "hooks.example.com"
    assert (await rig.delivery(job.id)).status == "delivered"


async def test_a_name_re_pointed_inside_after_submission_is_not_posted(rig: Rig) -> None:
    seen: list[httpx.Request] = []
    answers = {"hooks.example.com": ["93.184.216.34"]}
    job = await rig.final("https://hooks.example.com/done")
    sender = rig.sender(
        client=recording_transport(seen, status=500),
        allow_private=False,
        resolve=table_resolver(answers),
    )
    await sender.pass_once()
    answers["hooks.example.com"] = ["169.254.169.254"]
    rig.clock.advance(10.0)
    await sender.pass_once()
    assert len(seen) == 1
    delivery = await rig.delivery(job.id)
    assert delivery.attempts == 2
    assert delivery.last_error is not None
    assert "resolves to 169.254.169.254, a link-local address" in delivery.last_error


async def test_a_name_is_looked_up_by_the_name_servers_and_posted_to_the_address_given(
    rig: Rig,
) -> None:
    """The sender's own lookups (c-ares, a real name server on a local port) at every
    attempt, as with the injected resolver above."""
    seen: list[httpx.Request] = []
    job = await rig.final("https://hooks.test:8443/done")
    async with serving({"hooks.test": ["93.184.216.34"]}) as nameserver:
        sender = rig.sender(
            client=recording_transport(seen),
            allow_private=False,
            lookups=NameLookups(nameservers=[nameserver.address]),
        )
        assert await sender.pass_once() == 1
    [request] = seen
    assert str(request.url) == "https://93.184.216.34:8443/done"
    assert request.headers["Host"] == "hooks.test:8443"
    assert request.extensions["sni_hostname"] == "hooks.test"
    assert "hooks.test" in nameserver.asked
    assert (await rig.delivery(job.id)).status == "delivered"


async def unused_port() -> int:
    server = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()
    return port


# -- the secret through the management API ---------------------------------------------------


async def test_the_api_shows_the_users_secret_and_rotates_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "skiff.db")
    await store.open()
    settings = Settings(data_dir=tmp_path)
    services = build_services(settings, store, ManualClock(), open_cluster(settings))
    try:
        issued = await services.auth.bootstrap_admin(None)
        assert issued is not None
        transport = httpx.ASGITransport(app=management.build(services))
        auth = {"Authorization": f"Bearer {issued.key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://skiff") as api:
            assert (await api.get("/webhooksecret")).status_code == 401
            first = (await api.get("/webhooksecret", headers=auth)).json()["secret"]
            assert first.startswith("whsec_")
            assert (await api.get("/webhooksecret", headers=auth)).json() == {"secret": first}
            rotated = await api.post("/webhooksecret/rotate", headers=auth)
            assert rotated.status_code == 200
            second = rotated.json()["secret"]
            assert second.startswith("whsec_") and second != first
            assert (await api.get("/webhooksecret", headers=auth)).json() == {"secret": second}
            assert await store.webhook_secret(issued.user.id) == second
            schema = (await api.get("/openapi.json")).json()
            assert "/webhooksecret" in schema["paths"]
            assert "/webhooksecret/rotate" in schema["paths"]
    finally:
        await services.webhooks.aclose()
        await store.close()
