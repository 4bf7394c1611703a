"""Worker tokens on a real SQLite store: a token is good for its own endpoint only, also once
``Auth`` remembers it as checked."""

from __future__ import annotations

import pytest

from skiff.api.credentials import worker_token
from skiff.clock import ManualClock
from skiff.errors import Unauthorized
from skiff.services.auth import Auth
from skiff.store.sqlite import SQLiteStore


@pytest.fixture
def auth(store: SQLiteStore, clock: ManualClock) -> Auth:
    return Auth(store, clock, cache_seconds=5)


async def test_an_endpoints_token_opens_that_endpoint_every_time(auth: Auth) -> None:
    token = await auth.worker_token("ep-a")
    for header in (token, f"Bearer {token}", token):
        await auth.check_worker("ep-a", worker_token(header))


async def test_a_remembered_token_still_opens_no_other_endpoint(auth: Auth) -> None:
    token = await auth.worker_token("ep-a")
    await auth.check_worker("ep-a", token)
    with pytest.raises(Unauthorized):
        await auth.check_worker("ep-b", token)
    # ...and being refused there does not spoil it for its own endpoint.
    await auth.check_worker("ep-a", token)


@pytest.mark.parametrize("header", [None, "", "not-a-token", "Bearer "])
async def test_a_missing_or_forged_token_is_refused(auth: Auth, header: str | None) -> None:
    await auth.check_worker("ep-a", await auth.worker_token("ep-a"))
    with pytest.raises(Unauthorized):
        await auth.check_worker("ep-a", worker_token(header))


async def test_a_token_of_another_endpoint_is_refused_before_and_after_its_own_use(
    auth: Auth,
) -> None:
    other = await auth.worker_token("ep-b")
    with pytest.raises(Unauthorized):
        await auth.check_worker("ep-a", other)
    await auth.check_worker("ep-b", other)
    with pytest.raises(Unauthorized):
        await auth.check_worker("ep-a", other)
