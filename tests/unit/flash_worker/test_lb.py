"""The load-balanced Flash worker's door: ``/execute`` runs code, so under skiff (``SKIFF_LB_KEY``
set) it answers only requests that carry that key, which skiff's proxy adds; alone it answers
anyone. ``/ping`` always answers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from eventually import eventually_async
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


async def test_a_call_that_blocks_leaves_ping_answering(
    client: TestClient,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """skiff ends a load-balancing worker that stops answering its health check: a
    synchronous function (or a dependency's install) must not hold the server's loop."""
    monkeypatch.delenv(lb.LB_KEY_VARIABLE, raising=False)
    started, go = tmp_path / "started", tmp_path / "go"
    code = (
        "import pathlib, time\n"
        "def wait():\n"
        f"    pathlib.Path({str(started)!r}).touch()\n"
        f"    while not pathlib.Path({str(go)!r}).exists():\n"
        "        time.sleep(0.01)\n"
        "    return 'done'\n"
    )
    # Should the call hold the loop after all, this ends it, and the test fails, not hangs.
    breaker = threading.Timer(30, go.touch)
    breaker.start()
    try:
        call = asyncio.create_task(client.post("/execute", json=function_request("wait", code)))
        await eventually_async(started.exists, "the call to start")
        assert (await client.get("/ping")).status == 200
        assert not call.done()
        go.touch()
        answer = await asyncio.wait_for(call, 30)
        assert (await answer.json())["json_result"] == "done"
    finally:
        breaker.cancel()


def test_its_names_are_the_servers() -> None:
    assert lb.LB_KEY_VARIABLE == keys.LB_KEY_VARIABLE
    assert lb.LB_KEY_HEADER.lower() == keys.LB_KEY_HEADER


def test_the_key_is_per_endpoint_and_not_its_worker_token() -> None:
    secret = b"s" * 32
    one, other = keys.lb_key(secret, "ep1"), keys.lb_key(secret, "ep2")
    assert one != other and len(one) == 64
    assert one not in keys.worker_token(secret, "ep1")
