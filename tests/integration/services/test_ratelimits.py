"""Rate limits per user, endpoint and operation: memory storage with the limits library's clock
driven by hand, and Redis storage shared by replicas (those tests skip when no Redis answers)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import types
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable

import coredis
import httpx
import limits.storage.memory
import pytest
from fastapi import FastAPI

from skiff.api import errors
from skiff.clock import ManualClock
from skiff.errors import TooManyRequests
from skiff.services import ratelimits
from skiff.services.ratelimits import BASE_LIMITS, SLOT_TTL_SECONDS, WINDOW_SECONDS, RateLimits


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """One manual clock for RateLimits and for the library's memory storage.

    The storage reads ``time.time()`` through its module's ``time`` name; pointing that at the
    manual clock lets the tests move the window without sleeping.
    """
    manual = ManualClock()
    monkeypatch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=manual.now))
    return manual


def make(clock: ManualClock, enabled: bool = True, per_worker: int = 50) -> RateLimits:
    return RateLimits(enabled=enabled, requests_per_worker=per_worker, clock=clock)


async def spend(
    rl: RateLimits, n: int, op: str = "run", user: str = "u1", ep: str = "ep1", workers: int = 0
) -> None:
    for _ in range(n):
        async with rl.admit(user, ep, op, workers):
            pass


async def refused(
    rl: RateLimits, op: str = "run", user: str = "u1", ep: str = "ep1", workers: int = 0
) -> TooManyRequests:
    with pytest.raises(TooManyRequests) as info:
        async with rl.admit(user, ep, op, workers, named=f"/{op}"):
            pass
    return info.value


async def test_window_refuses_the_1001st_run_within_10_s(clock: ManualClock) -> None:
    rl = make(clock)
    await spend(rl, 1000)
    exc = await refused(rl)
    assert exc.status_code == 429
    assert exc.retry_after == 10
    assert "1000 requests per 10 s for /run" in exc.message
    assert "retry after 10 s" in exc.message


async def test_retry_after_counts_down_and_the_window_moves(clock: ManualClock) -> None:
    rl = make(clock)
    await spend(rl, 500)
    clock.advance(3.5)
    await spend(rl, 500)
    # The first 500 leave the window 10 s after they came, 6.5 s from now: rounded up to 7.
    assert (await refused(rl)).retry_after == 7
    clock.advance(6.4)
    assert (await refused(rl)).retry_after == 1
    clock.advance(0.2)
    # The first 500 have left; the next 500 have a place again, the 501st does not.
    await spend(rl, 500)
    assert (await refused(rl)).retry_after >= 1


async def test_retry_after_is_never_below_one(clock: ManualClock) -> None:
    rl = make(clock)
    await spend(rl, BASE_LIMITS["requests"][0], op="requests")
    clock.advance(9.999)
    assert (await refused(rl, op="requests")).retry_after == 1


async def test_users_endpoints_and_operations_have_separate_budgets(clock: ManualClock) -> None:
    rl = make(clock)
    await spend(rl, 100, op="cancel")
    await refused(rl, op="cancel")
    await spend(rl, 100, op="cancel", user="u2")
    await spend(rl, 100, op="cancel", ep="ep2")
    await spend(rl, 1, op="run")
    await refused(rl, op="cancel", user="u2")
    await refused(rl, op="cancel", ep="ep2")


async def test_ids_with_separators_do_not_share_a_budget(clock: ManualClock) -> None:
    rl = make(clock)
    await spend(rl, 2, op="purge-queue", user="a/b", ep="c")
    await refused(rl, op="purge-queue", user="a/b", ep="c")
    await spend(rl, 2, op="purge-queue", user="a", ep="b/c")


async def test_third_concurrent_request_is_refused_and_a_slot_frees_on_exit(
    clock: ManualClock,
) -> None:
    rl = make(clock)
    first = rl.admit("u1", "ep1", "requests", 0)
    second = rl.admit("u1", "ep1", "requests", 0)
    await first.__aenter__()
    await second.__aenter__()
    assert rl.in_flight("u1", "ep1", "requests") == 2
    exc = await refused(rl, op="requests")
    assert exc.retry_after == 1
    assert "2 concurrent requests for /requests" in exc.message
    # Another user, or the same user on another endpoint, is not held up.
    await spend(rl, 1, op="requests", user="u2")
    await first.__aexit__(None, None, None)
    await spend(rl, 1, op="requests")
    await second.__aexit__(None, None, None)
    assert rl.in_flight("u1", "ep1", "requests") == 0


async def test_a_slot_frees_when_the_request_fails(clock: ManualClock) -> None:
    rl = make(clock)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            async with rl.admit("u1", "ep1", "requests", 0):
                raise RuntimeError("handler failed")
    assert rl.in_flight("u1", "ep1", "requests") == 0
    async with rl.admit("u1", "ep1", "requests", 0), rl.admit("u1", "ep1", "requests", 0):
        assert rl.in_flight("u1", "ep1", "requests") == 2


async def test_a_slot_frees_when_the_request_is_cancelled(clock: ManualClock) -> None:
    rl = make(clock)
    entered = asyncio.Event()

    async def hold() -> None:
        async with rl.admit("u1", "ep1", "requests", 0):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(hold())
    await entered.wait()
    assert rl.in_flight("u1", "ep1", "requests") == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rl.in_flight("u1", "ep1", "requests") == 0


async def test_concurrency_refusal_does_not_spend_the_window(clock: ManualClock) -> None:
    rl = make(clock)
    held = [rl.admit("u1", "ep1", "requests", 0) for _ in range(2)]
    for cm in held:
        await cm.__aenter__()
    for _ in range(20):
        await refused(rl, op="requests")
    for cm in held:
        await cm.__aexit__(None, None, None)
    # 2 of the 10 spent by the held requests; the 20 refused ones cost nothing.
    await spend(rl, 8, op="requests")
    assert "10 requests per 10 s" in (await refused(rl, op="requests")).message


async def test_window_refusal_does_not_hold_a_slot(clock: ManualClock) -> None:
    rl = make(clock)
    await spend(rl, 10, op="requests")
    for _ in range(5):
        await refused(rl, op="requests")
    assert rl.in_flight("u1", "ep1", "requests") == 0


async def test_running_workers_raise_the_request_limit(clock: ManualClock) -> None:
    rl = make(clock, per_worker=5)
    assert rl.request_limit("purge-queue", 0) == 2
    assert rl.request_limit("purge-queue", 3) == 15
    assert rl.request_limit("run", 3) == 1000
    await spend(rl, 15, op="purge-queue", workers=3)
    exc = await refused(rl, op="purge-queue", workers=3)
    assert "15 requests per 10 s for /purge-queue" in exc.message


async def test_fewer_workers_do_not_reset_the_window(clock: ManualClock) -> None:
    rl = make(clock, per_worker=5)
    await spend(rl, 15, op="purge-queue", workers=3)
    # Workers gone: the limit falls back to 2 and the 15 already spent still count.
    await refused(rl, op="purge-queue", workers=0)
    # Back up to 4 workers (20): only 5 more fit, not a fresh 20.
    await spend(rl, 5, op="purge-queue", workers=4)
    await refused(rl, op="purge-queue", workers=4)


async def test_zero_per_worker_keeps_the_base_limit(clock: ManualClock) -> None:
    rl = make(clock, per_worker=0)
    assert rl.request_limit("purge-queue", 100) == 2


async def test_disabled_limits_admit_everything(clock: ManualClock) -> None:
    rl = make(clock, enabled=False)
    assert not rl.enabled
    await spend(rl, 50, op="purge-queue")
    held = [rl.admit("u1", "ep1", "requests", 0) for _ in range(10)]
    for cm in held:
        await cm.__aenter__()
    for cm in held:
        await cm.__aexit__(None, None, None)


@pytest.mark.parametrize("op", ["health", "retry", "not-an-operation"])
async def test_unknown_operations_are_never_limited(clock: ManualClock, op: str) -> None:
    rl = make(clock)
    assert rl.request_limit(op, 0) is None
    await spend(rl, 3000, op=op)
    held = [rl.admit("u1", "ep1", op, 0) for _ in range(500)]
    for cm in held:
        await cm.__aenter__()
    assert rl.in_flight("u1", "ep1", op) == 0
    for cm in held:
        await cm.__aexit__(None, None, None)


def test_the_table_matches_the_issue() -> None:
    assert BASE_LIMITS == {
        "runsync": (2000, 400),
        "run": (1000, 200),
        "status": (2000, 400),
        "stream": (2000, 400),
        "cancel": (100, 20),
        "purge-queue": (2, None),
        "openai": (2000, 400),
        "requests": (10, 2),
    }


async def test_system_clock_by_default() -> None:
    # No clock given and the real storage clock: within one real window, the 3rd purge is refused.
    rl = RateLimits(enabled=True, requests_per_worker=50)
    await spend(rl, 2, op="purge-queue")
    exc = await refused(rl, op="purge-queue")
    assert 1 <= exc.retry_after <= 10


async def test_429_carries_retry_after_and_the_usual_error_body() -> None:
    app = FastAPI()
    errors.install(app, "error")

    @app.get("/limited")
    async def limited() -> None:
        raise TooManyRequests("rate limit exceeded; retry after 3 s", 3)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/limited")
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "3"
    assert response.json() == {"error": "rate limit exceeded; retry after 3 s"}


# --- Storage selected by URL: memory:// (per process) or redis:// (shared by replicas) ---------

#: The Redis the shared-storage tests use; every test writes under a key prefix of its own.
REDIS_URL = os.environ.get("SKIFF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A fresh key prefix on the test Redis, its keys deleted afterwards; skips without Redis."""
    parts = urllib.parse.urlsplit(REDIS_URL)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
    except (OSError, TimeoutError) as err:
        pytest.skip(
            f"Redis not reachable at {host}:{port} ({err}): start redis-server, or point "
            "SKIFF_TEST_REDIS_URL at one"
        )
    writer.close()
    await writer.wait_closed()
    prefix = f"skiff-test:{uuid.uuid4().hex}"
    yield prefix
    client = coredis.Redis.from_url(REDIS_URL)
    try:
        keys = await client.keys(f"{prefix}:*")
        if keys:
            await client.delete(list(keys))
    finally:
        client.connection_pool.disconnect()


@pytest.fixture
async def replica(redis_prefix: str) -> AsyncIterator[Callable[..., RateLimits]]:
    """Builds RateLimits on the test Redis, as each replica of one deployment would; closes them."""
    made: list[RateLimits] = []

    def build(per_worker: int = 50) -> RateLimits:
        rl = RateLimits(True, per_worker, storage=REDIS_URL, key_prefix=redis_prefix)
        made.append(rl)
        return rl

    yield build
    for rl in made:
        await rl.aclose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "url",
    [
        "",
        "memory",
        "memory://somewhere",
        "redis",
        "redis://",
        "redis://:6379",
        "redis://127.0.0.1:port",
        "redis://127.0.0.1:0",
        "redis://127.0.0.1:6379/zero",
        "http://127.0.0.1:6379",
        "memcached://127.0.0.1:11211",
        "async+redis://127.0.0.1:6379",
    ],
)
def test_an_invalid_storage_url_fails_at_construction(url: str) -> None:
    with pytest.raises(ValueError, match="SKIFF_RATE_LIMIT_STORAGE"):
        RateLimits(True, 50, storage=url)


def test_an_invalid_storage_url_does_not_echo_its_password() -> None:
    with pytest.raises(ValueError, match="SKIFF_RATE_LIMIT_STORAGE") as info:
        RateLimits(True, 50, storage="redis+sentinel://user:s3cret@127.0.0.1:26379/0")
    assert "s3cret" not in str(info.value)
    assert "***" in str(info.value)


@pytest.mark.parametrize(
    ("url", "shared"),
    [
        ("memory://", False),
        ("redis://127.0.0.1:6379", True),
        ("redis://127.0.0.1:6379/3", True),
        ("redis://:pw@127.0.0.1:6379/0", True),
        ("rediss://127.0.0.1:6380/0", True),
        ("REDIS://127.0.0.1:6379", True),
    ],
)
def test_valid_storage_urls_build_without_an_event_loop_or_a_connection(
    url: str, shared: bool
) -> None:
    # Built where Services are built: no loop running, and Redis is reached only when used.
    assert RateLimits(True, 50, storage=url).shared is shared


def test_memory_is_the_default_storage() -> None:
    assert not RateLimits(True, 50).shared


async def test_memory_storage_keeps_each_instance_its_own_budget(clock: ManualClock) -> None:
    one = RateLimits(True, 50, clock, storage="memory://")
    two = RateLimits(True, 50, clock, storage="memory://")
    await spend(one, 10, op="requests")
    await refused(one, op="requests")
    await spend(two, 10, op="requests")
    clock.advance(WINDOW_SECONDS + 1)
    async with one.admit("u1", "ep1", "requests", 0), one.admit("u1", "ep1", "requests", 0):
        assert await one.shared_in_flight("u1", "ep1", "requests") == 2
        assert await two.shared_in_flight("u1", "ep1", "requests") == 0
        async with two.admit("u1", "ep1", "requests", 0):
            assert two.in_flight("u1", "ep1", "requests") == 1
    await one.aclose()
    await two.aclose()


async def test_redis_replicas_share_one_window(replica: Callable[..., RateLimits]) -> None:
    a, b = replica(), replica()
    assert a.shared and b.shared
    await spend(a, 6, op="requests")
    await spend(b, 4, op="requests")
    for rl in (a, b):
        exc = await refused(rl, op="requests")
        assert "10 requests per 10 s for /requests" in exc.message
        assert 1 <= exc.retry_after <= WINDOW_SECONDS
    # Other identities have budgets of their own there too.
    await spend(b, 10, op="requests", user="u2")
    await spend(a, 10, op="requests", ep="ep2")
    await spend(a, 1, op="run")


async def test_redis_replicas_share_the_concurrency_slots(
    replica: Callable[..., RateLimits],
) -> None:
    a, b = replica(), replica()
    first = a.admit("u1", "ep1", "requests", 0)
    second = b.admit("u1", "ep1", "requests", 0)
    await first.__aenter__()
    await second.__aenter__()
    assert a.in_flight("u1", "ep1", "requests") == 1
    assert await a.shared_in_flight("u1", "ep1", "requests") == 2
    for rl in (a, b):
        exc = await refused(rl, op="requests")
        assert exc.retry_after == 1
        assert "2 concurrent requests for /requests" in exc.message
    await spend(b, 1, op="requests", user="u2")
    # A slot given back on one replica is free on the other.
    await first.__aexit__(None, None, None)
    assert await b.shared_in_flight("u1", "ep1", "requests") == 1
    await spend(b, 1, op="requests")
    await second.__aexit__(None, None, None)
    assert await a.shared_in_flight("u1", "ep1", "requests") == 0
    # The refused ones cost nothing: 2 held + 1 spent of 10.
    await spend(a, 7, op="requests")
    await refused(b, op="requests")


async def test_redis_slot_key_expires_and_is_renewed(
    replica: Callable[..., RateLimits], redis_prefix: str
) -> None:
    rl = replica()
    client = coredis.Redis.from_url(REDIS_URL)
    try:
        async with rl.admit("u1", "ep1", "requests", 0):
            keys = list(await client.keys(f"{redis_prefix}:CONCURRENCY/*"))
            assert len(keys) == 1
            assert 0 < await client.ttl(keys[0]) <= SLOT_TTL_SECONDS
        # Given back to zero, the key is gone rather than left at 0.
        assert not await client.keys(f"{redis_prefix}:CONCURRENCY/*")
    finally:
        client.connection_pool.disconnect()


async def test_redis_slots_free_when_requests_fail_or_are_cancelled(
    replica: Callable[..., RateLimits],
) -> None:
    a, b = replica(), replica()
    for _ in range(3):
        with pytest.raises(RuntimeError):
            async with a.admit("u1", "ep1", "cancel", 0):
                raise RuntimeError("handler failed")
    entered = asyncio.Event()

    async def hold() -> None:
        async with a.admit("u1", "ep1", "cancel", 0):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(hold())
    await entered.wait()
    assert await b.shared_in_flight("u1", "ep1", "cancel") == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await b.shared_in_flight("u1", "ep1", "cancel") == 0


async def test_redis_requests_cancelled_at_any_point_leak_no_slot(
    replica: Callable[..., RateLimits],
) -> None:
    a, b = replica(), replica()

    async def one() -> None:
        async with a.admit("u1", "ep1", "cancel", 0):
            await asyncio.sleep(0)

    # Cancel after 0, 1, 2, ... loop turns: before, during and after each Redis command.
    tasks = []
    for turns in range(100):
        task = asyncio.create_task(one())
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        tasks.append(task)
    await asyncio.gather(*tasks, return_exceptions=True)
    await a.aclose()  # waits for the slots still being given back
    assert a.in_flight("u1", "ep1", "cancel") == 0
    assert await b.shared_in_flight("u1", "ep1", "cancel") == 0


async def test_redis_keeps_the_dynamic_limit_on_one_window(
    replica: Callable[..., RateLimits],
) -> None:
    a, b = replica(per_worker=5), replica(per_worker=5)
    await spend(a, 8, op="purge-queue", workers=3)
    await spend(b, 7, op="purge-queue", workers=3)
    assert "15 requests per 10 s" in (await refused(a, op="purge-queue", workers=3)).message
    # Workers gone: the limit falls back to 2 and the 15 already spent still count.
    await refused(b, op="purge-queue", workers=0)
    # Back up to 4 workers (20): only 5 more fit, not a fresh 20.
    await spend(b, 5, op="purge-queue", workers=4)
    await refused(a, op="purge-queue", workers=4)


async def test_redis_unreachable_admits_unlimited_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rl = RateLimits(True, 50, storage=f"redis://127.0.0.1:{free_port()}/0")
    try:
        with caplog.at_level(logging.WARNING, logger="skiff.services.ratelimits"):
            await spend(rl, 12, op="requests")
            async with rl.admit("u1", "ep1", "requests", 0):
                assert rl.in_flight("u1", "ep1", "requests") == 1
    finally:
        await rl.aclose()
    assert rl.in_flight("u1", "ep1", "requests") == 0
    warnings = [r for r in caplog.records if "rate limits not enforced" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_silent_redis_times_out_and_is_left_alone_for_a_while(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ratelimits, "REDIS_TIMEOUT_SECONDS", 0.2)
    connections: list[asyncio.StreamWriter] = []

    async def accept_and_say_nothing(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)

    server = await asyncio.start_server(accept_and_say_nothing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    rl = RateLimits(True, 50, storage=f"redis://127.0.0.1:{port}/0")
    try:
        with caplog.at_level(logging.WARNING, logger="skiff.services.ratelimits"):
            started = asyncio.get_running_loop().time()
            await spend(rl, 12, op="requests")
            # One timeout for the first request; the next ones do not ask Redis again.
            assert asyncio.get_running_loop().time() - started < 1.5
        assert len(connections) == 1
        assert "trying it again in" in caplog.text
    finally:
        await rl.aclose()
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_disabled_limits_do_not_reach_redis() -> None:
    rl = RateLimits(False, 50, storage=f"redis://127.0.0.1:{free_port()}/0")
    await spend(rl, 20, op="requests")
    await rl.aclose()
