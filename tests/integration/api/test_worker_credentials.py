"""What the worker routes say to a worker that sends a user API key, through the in-process app:
a worker started by hand where ``runpod config`` was run sends the key of
``~/.runpod/config.toml``, and is told to use the endpoint's worker token instead of being
refused for ever with no reason it can act on."""

from __future__ import annotations

import httpx
import pytest

from in_process import ADMIN_KEY, InProcess

ROUTES = [
    ("GET", "job-take/w1"),
    ("GET", "job-take-batch/w1?batch_size=2"),
    ("GET", "job-stop/w1"),
    ("POST", "job-done/w1/some-job"),
    ("GET", "ping/w1"),
]


def as_worker(app: InProcess, key: str) -> httpx.AsyncClient:
    """A client sending ``key`` as the SDK's worker sends RUNPOD_AI_API_KEY: the key alone."""
    return httpx.AsyncClient(
        transport=app.transport, base_url=str(app.http.base_url), headers={"Authorization": key}
    )


@pytest.mark.parametrize(("method", "route"), ROUTES)
async def test_a_user_api_key_on_a_worker_route_is_told_to_use_the_worker_token(
    in_process: InProcess, method: str, route: str
) -> None:
    endpoint = await in_process.create_endpoint()
    async with as_worker(in_process, ADMIN_KEY) as worker:
        refused = await worker.request(method, f"/v2/{endpoint['id']}/{route}", json={})
    assert refused.status_code == 401, refused.text
    message = refused.json()["error"]
    assert message.startswith("this is a user API key, not a worker token")
    assert "skiff worker-token" in message and "RUNPOD_AI_API_KEY" in message


async def test_a_key_that_is_neither_is_only_an_invalid_worker_token(
    in_process: InProcess,
) -> None:
    endpoint = await in_process.create_endpoint()
    async with as_worker(in_process, "sk_nobody") as worker:
        refused = await worker.get(f"/v2/{endpoint['id']}/job-take/w1")
    assert refused.status_code == 401
    assert refused.json()["error"] == "invalid worker token for this endpoint"
    # The endpoint's own token still opens it.
    async with await in_process.worker(endpoint["id"]) as worker:
        assert (await worker.get(f"/v2/{endpoint['id']}/ping/w1")).status_code == 200
