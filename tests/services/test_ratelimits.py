"""Rate limits per user, endpoint and operation, with the limits library's clock driven by hand."""

from __future__ import annotations

import asyncio
import types

import httpx
import limits.storage.memory
import pytest
from fastapi import FastAPI

from skiff.api import errors
from skiff.clock import ManualClock
from skiff.errors import TooManyRequests
from skiff.services.ratelimits import BASE_LIMITS, RateLimits


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
        async with rl.admit(user, ep, op, workers):
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
