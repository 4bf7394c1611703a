"""The load-balanced Flash worker's door: ``/execute`` runs code, so under skiff (``SKIFF_LB_KEY``
set) it answers only requests that carry that key, which skiff's proxy adds; alone it answers
anyone. ``/ping`` always answers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from flash_programs import function_request
from skiff.domain import keys
from skiff.flash_worker import lb

REQUEST = function_request("add", "def add(a, b):\n    return a + b\n", 1, 2)


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    async with TestClient(TestServer(lb.app())) as c:
        yield c


async def test_under_skiff_only_a_request_with_the_endpoints_key_runs(
    client: TestClient,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(lb.LB_KEY_VARIABLE, "k" * 64)
    for headers in ({}, {lb.LB_KEY_HEADER: "guess"}, {lb.LB_KEY_HEADER: "k" * 63 + "é"}):
        refused = await client.post("/execute", json=REQUEST, headers=headers)
        assert refused.status == 403
        assert "skiff's proxy" in (await refused.json())["error"]
    allowed = await client.post("/execute", json=REQUEST, headers={lb.LB_KEY_HEADER: "k" * 64})
    assert allowed.status == 200
    assert (await allowed.json())["json_result"] == 3
    assert (await client.get("/ping")).status == 200


async def test_alone_it_answers_anyone(
    client: TestClient,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(lb.LB_KEY_VARIABLE, raising=False)
    answer = await client.post("/execute", json=REQUEST)
    assert answer.status == 200 and (await answer.json())["success"] is True


def test_its_names_are_the_servers() -> None:
    assert lb.LB_KEY_VARIABLE == keys.LB_KEY_VARIABLE
    assert lb.LB_KEY_HEADER.lower() == keys.LB_KEY_HEADER


def test_the_key_is_per_endpoint_and_not_its_worker_token() -> None:
    secret = b"s" * 32
    one, other = keys.lb_key(secret, "ep1"), keys.lb_key(secret, "ep2")
    assert one != other and len(one) == 64
    assert one not in keys.worker_token(secret, "ep1")
