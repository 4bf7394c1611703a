"""Webhook hosts are looked up without taking the server's shared threads, and one user cannot
fill the lookups: real c-ares lookups (``NameLookups``) against a real name server on a local
UDP port that answers some names, says others do not exist and never answers the rest, and the
server's own wiring (``build_services``) with the system resolver made to hang."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from eventually import eventually_async
from name_server import SILENT, NameServer, serving
from service_stubs import nothing_blocks
from skiff.app import build_services, open_cluster
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain.endpoints import Endpoint, EndpointSpec
from skiff.domain.jobs import parse_job_request
from skiff.errors import Invalid
from skiff.services import webhooks as webhooks_module
from skiff.services.job_events import JobEvents
from skiff.services.jobs import Jobs
from skiff.services.wakeups import Wakeups
from skiff.services.webhooks import (
    PER_USER_LOOKUPS,
    NameLookups,
    WebhookSender,
    check_webhook_url,
)
from skiff.store.base import User
from skiff.store.sqlite import SQLiteStore

RECORDS = {
    "hooks.test": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "inside.test": ["10.0.0.5"],
}


#: Bounds how long a broken test hangs; never what a test asserts.
HANG_SECONDS = 60.0


@pytest.fixture
async def nameserver() -> AsyncIterator[NameServer]:
    async with serving(RECORDS) as server:
        yield server


@pytest.fixture
async def lookups(nameserver: NameServer) -> AsyncIterator[NameLookups]:
    made = NameLookups(nameservers=[nameserver.address])
    yield made
    await made.aclose()


@pytest.fixture
async def one_thread() -> None:
    """The loop's default executor cut down to one thread: whatever holds it holds up every
    ``asyncio.to_thread``."""
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    asyncio.get_running_loop().set_default_executor(executor)


def slow(n: int, user: str = "a") -> str:
    return f"{user}{n}{SILENT}"


# -- (a) a lookup that never ends takes no shared thread ----------------------------------------


async def test_lookups_nobody_answers_leave_the_default_executor_free(
    nameserver: NameServer, lookups: NameLookups, one_thread: Any
) -> None:
    """Several users' lookups hang at a name server that never answers; a ``to_thread`` call
    made while they hang runs on the loop's only executor thread, and they are still hanging."""
    users = ["a", "b", "c"]
    hanging = [
        asyncio.create_task(lookups.resolve(slow(n, user), 443, user))
        for user in users
        for n in range(PER_USER_LOOKUPS)
    ]
    await nameserver.asked_for(*(slow(n, user) for user in users for n in range(PER_USER_LOOKUPS)))
    async with asyncio.timeout(HANG_SECONDS):
        assert await asyncio.to_thread(lambda: "ran") == "ran"
    assert not any(task.done() for task in hanging)
    assert lookups.under_way() == len(hanging)
    for task in hanging:
        task.cancel()
    await asyncio.gather(*hanging, return_exceptions=True)


async def test_a_submissions_webhook_lookup_takes_no_thread_of_the_default_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: Any
) -> None:
    """The server as ``build_services`` wires it, with the system resolver hanging: here
    ``socket.getaddrinfo`` blocks for any name (a name server that never answers; the system
    resolver cannot be pointed at one, so it is replaced), while it still reads numeric hosts at
    once as glibc does, and the default executor is a single thread. A job whose webhook names
    ``localhost`` (``/etc/hosts``) is refused at once as loopback, as the check always refused
    it; the system resolver is never asked, and a ``to_thread`` call made meanwhile runs. Before
    the fix the lookup took the executor's thread: the submission was refused only when its
    lookup timed out, and every ``to_thread`` waited behind it."""
    real = socket.getaddrinfo
    release = threading.Event()
    asked: list[str] = []

    def hanging_getaddrinfo(
        host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> Any:
        try:
            return real(host, port, family, type, proto, flags | socket.AI_NUMERICHOST)
        except socket.gaierror:
            if flags & socket.AI_NUMERICHOST:
                raise
        asked.append(host)
        release.wait()
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hanging_getaddrinfo)
    store = SQLiteStore(tmp_path / "skiff.db")
    await store.open()
    settings = Settings(data_dir=tmp_path)
    services = build_services(settings, store, ManualClock(), open_cluster(settings))
    endpoint = Endpoint(
        id="ep1",
        userId="u1",
        version=1,
        createdAt=0.0,
        spec=EndpointSpec(name="ep", templateId="t"),
    )
    try:
        for url, refusal in [
            ("http://localhost/hook", "a loopback address"),
            ("http://127.1/hook", "resolves to 127.0.0.1, a loopback address"),
        ]:
            body = f'{{"input": {{}}, "webhook": "{url}"}}'.encode()
            submission = asyncio.create_task(
                services.jobs.submit(endpoint, parse_job_request(body, 60_000), sync=False)
            )
            ran = asyncio.create_task(asyncio.to_thread(lambda: "ran"))
            with pytest.raises(Invalid) as info:
                await submission
            assert refusal in info.value.message and info.value.field == "webhook"
            assert asked == []
            async with asyncio.timeout(HANG_SECONDS):
                assert await ran == "ran"
    finally:
        release.set()
        await services.webhooks.aclose()
        await store.close()


async def test_a_lookup_nobody_answers_ends_by_itself_with_the_timeouts_400(
    nameserver: NameServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """c-ares gives up on a name nobody answers by itself (its tries are bounded), and the
    check answers as a lookup past the timeout always has. The timeout is cut down here (the
    check's own, and c-ares's tries with it) so the test does not wait 5 s."""
    monkeypatch.setattr(webhooks_module, "DNS_TIMEOUT_SECONDS", 0.5)
    lookups = NameLookups(nameservers=[nameserver.address], try_seconds=0.25)
    try:
        with pytest.raises(Invalid) as info:
            await check_webhook_url(f"https://{slow(1)}/hook", False, lookups.for_user("a"))
        assert info.value.field == "webhook"
        assert info.value.message == (
            f"webhook host {slow(1)} cannot be resolved: the lookup took longer than 0.5 s"
        )
        # The query itself ends too, not only the wait for it.
        await eventually_async(lambda: lookups.under_way() == 0, "the lookup to end")
    finally:
        await lookups.aclose()


# -- (b) one user's lookups cannot fill the resolver ---------------------------------------------


async def test_a_user_over_the_cap_is_refused_at_once_while_another_users_lookup_proceeds(
    nameserver: NameServer, lookups: NameLookups
) -> None:
    hanging = [
        asyncio.create_task(check_webhook_url(f"http://{slow(n)}/", False, lookups.for_user("a")))
        for n in range(PER_USER_LOOKUPS)
    ]
    await nameserver.asked_for(*(slow(n) for n in range(PER_USER_LOOKUPS)))
    with pytest.raises(Invalid) as info:
        await check_webhook_url(f"http://{slow(99)}/", False, lookups.for_user("a"))
    assert info.value.field == "webhook"
    assert info.value.message == (
        f"webhook host {slow(99)} cannot be resolved now: the webhook hosts of your submissions"
        f" already have {PER_USER_LOOKUPS} lookups under way, the most one user may have at once;"
        " try again when they end"
    )
    assert slow(99) not in nameserver.asked
    # Another user's lookup goes on and is answered.
    assert sorted(await lookups.for_user("b")("hooks.test", 443)) == sorted(RECORDS["hooks.test"])
    await check_webhook_url("https://hooks.test/hook", False, lookups.for_user("b"))
    # Numeric hosts need no lookup: the cap does not stop them.
    await check_webhook_url("http://93.184.216.34/hook", False, lookups.for_user("a"))
    # A host the user already has being looked up is waited on again, not refused nor looked
    # up a second time (a burst of submissions naming one webhook host).
    again = asyncio.create_task(
        check_webhook_url(f"http://{slow(0)}/x", False, lookups.for_user("a"))
    )
    await asyncio.sleep(0)
    assert not again.done()
    assert lookups.under_way() == PER_USER_LOOKUPS
    # A check that stops waiting gives its place back.
    hanging[0].cancel()
    again.cancel()
    await asyncio.gather(hanging[0], again, return_exceptions=True)
    late = asyncio.create_task(
        check_webhook_url(f"http://{slow(100)}/", False, lookups.for_user("a"))
    )
    await nameserver.asked_for(slow(100))
    for task in [*hanging[1:], late]:
        task.cancel()
    await asyncio.gather(*hanging[1:], late, return_exceptions=True)


async def test_submissions_of_one_user_over_the_cap_get_400_and_other_users_jobs_are_queued(
    tmp_path: Path, nameserver: NameServer
) -> None:
    """Through ``Jobs.submit`` with the sender's guard, as the server wires them: the cap counts
    the submitter's lookups."""
    store = SQLiteStore(tmp_path / "skiff.db")
    await store.open()
    clock = ManualClock()
    sender = WebhookSender(store, clock, lookups=NameLookups(nameservers=[nameserver.address]))
    wakeups = Wakeups()
    jobs = Jobs(store, clock, wakeups, JobEvents(wakeups), nothing_blocks, sender.guard)
    endpoints = {}
    for user in ("ua", "ub"):
        await store.create_user(User(id=user, name=user, is_admin=False, created_at=0.0))
        endpoints[user] = Endpoint(
            id=f"ep-{user}",
            userId=user,
            version=1,
            createdAt=0.0,
            spec=EndpointSpec(name=f"ep-{user}", templateId="t"),
        )
        await store.create_endpoint(endpoints[user])

    def submit(user: str, host: str) -> asyncio.Task[Any]:
        body = f'{{"input": {{}}, "webhook": "https://{host}/done"}}'.encode()
        return asyncio.create_task(
            jobs.submit(endpoints[user], parse_job_request(body, 60_000), sync=False)
        )

    try:
        hanging = [submit("ua", slow(n)) for n in range(PER_USER_LOOKUPS)]
        await nameserver.asked_for(*(slow(n) for n in range(PER_USER_LOOKUPS)))
        with pytest.raises(Invalid, match="lookups under way, the most one user may have"):
            await submit("ua", slow(PER_USER_LOOKUPS))
        job = await submit("ub", "hooks.test")
        assert job.webhook == "https://hooks.test/done"
        for task in hanging:
            task.cancel()
        await asyncio.gather(*hanging, return_exceptions=True)
    finally:
        await sender.aclose()
        await store.close()


# -- (c) good names and numeric hosts as before --------------------------------------------------


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("127.1", ["127.0.0.1"]),
        ("0x7f.1", ["127.0.0.1"]),
        ("2130706433", ["127.0.0.1"]),
        ("8.8.2056", ["8.8.8.8"]),
        ("::1", ["::1"]),
        ("::ffff:1.2.3.4", ["::ffff:1.2.3.4"]),
    ],
)
async def test_numeric_hosts_are_read_as_getaddrinfo_reads_them_without_a_query(
    nameserver: NameServer, lookups: NameLookups, host: str, addresses: list[str]
) -> None:
    assert await lookups.resolve(host, 80, "a") == addresses
    system = await asyncio.get_running_loop().getaddrinfo(host, 80, type=socket.SOCK_STREAM)
    assert addresses == list(dict.fromkeys(str(info[4][0]) for info in system))
    assert nameserver.asked == []


async def test_shorthand_numeric_hosts_are_checked_as_before(lookups: NameLookups) -> None:
    with pytest.raises(Invalid) as info:
        await check_webhook_url("http://127.1:8080/hook", False, lookups.for_user("a"))
    assert "webhook host 127.1 resolves to 127.0.0.1, a loopback address" in info.value.message
    await check_webhook_url("http://8.8.2056/hook", False, lookups.for_user("a"))


async def test_names_are_answered_by_the_name_servers(
    nameserver: NameServer, lookups: NameLookups
) -> None:
    assert sorted(await lookups.resolve("hooks.test", 443)) == sorted(RECORDS["hooks.test"])
    await check_webhook_url("https://hooks.test/hook", False, lookups.for_user("a"))
    with pytest.raises(Invalid) as info:
        await check_webhook_url("https://inside.test/hook", False, lookups.for_user("a"))
    assert "inside.test resolves to 10.0.0.5, a private address" in info.value.message
    with pytest.raises(Invalid) as info:
        await check_webhook_url("https://nowhere.test/hook", False, lookups.for_user("a"))
    assert info.value.message.startswith("webhook host nowhere.test cannot be resolved (")
    assert info.value.message.endswith("); check the name")
    assert {"hooks.test", "inside.test", "nowhere.test"} <= set(nameserver.asked)


def _hosts_file_names() -> list[str]:
    names: list[str] = []
    try:
        lines = Path("/etc/hosts").read_text().splitlines()
    except OSError:
        return names
    for line in lines:
        fields = line.split("#", 1)[0].split()
        names += [n for n in fields[1:] if n != "localhost" and not n.endswith(".localhost")]
    return list(dict.fromkeys(names))


async def test_names_in_etc_hosts_resolve_as_the_system_resolves_them(
    nameserver: NameServer, lookups: NameLookups
) -> None:
    """Every name ``/etc/hosts`` lists gets the addresses the system resolver gives it, without
    a query to the name servers; ``localhost`` is loopback (c-ares adds ``::1`` to it)."""
    assert {"127.0.0.1"} <= set(await lookups.resolve("localhost", 80))
    names = _hosts_file_names()
    if not names:
        pytest.skip("/etc/hosts lists no name but localhost here")
    loop = asyncio.get_running_loop()
    for name in names:
        system = await loop.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
        assert set(await lookups.resolve(name, 80)) == {str(info[4][0]) for info in system}, name
    assert nameserver.asked == []


async def test_closing_the_sender_ends_the_lookups_under_way(
    nameserver: NameServer, tmp_path: Path
) -> None:
    """The server's shutdown closes the sender, which ends its lookups: a check still waiting
    is answered, and no query is left behind."""
    store = SQLiteStore(tmp_path / "skiff.db")
    await store.open()
    lookups = NameLookups(nameservers=[nameserver.address])
    sender = WebhookSender(store, ManualClock(), lookups=lookups)
    check = asyncio.create_task(sender.guard(f"http://{slow(1)}/", "a"))
    await nameserver.asked_for(slow(1))
    await sender.aclose()
    with pytest.raises(Invalid, match="cannot be resolved"):
        await check
    assert lookups.under_way() == 0
    await store.close()


async def test_a_webhook_to_another_replicas_address_is_refused_once_the_replicas_are_read(
    tmp_path: Path, nameserver: NameServer
) -> None:
    """The sender as the server runs it with other replicas (``app.py``): their URLs from the
    cluster, a replica's name looked up with the sender's own lookups."""
    store = SQLiteStore(tmp_path / "skiff.db")
    await store.open()
    sender = WebhookSender(
        store, ManualClock(), lookups=NameLookups(nameservers=[nameserver.address])
    )

    async def peers() -> dict[str, tuple[str, list[str]]]:
        return {"r-1": ("http://127.0.0.1:8000", []), "r-2": ("http://hooks.test:8000", [])}

    try:
        # A public host, until it is known as a replica's.
        await sender.guard("https://hooks.test/done", "ua")
        await sender.peer_addresses(peers).learn()
        with pytest.raises(Invalid, match=r"93\.184\.216\.34, an address of this server"):
            await sender.guard("https://hooks.test/done", "ua")
        with pytest.raises(Invalid, match="is an address of this server"):
            await sender.guard("https://[2606:2800:220:1:248:1893:25c8:1946]/done", "ua")
    finally:
        await sender.aclose()
        await store.close()
