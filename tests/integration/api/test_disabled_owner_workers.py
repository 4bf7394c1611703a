"""A disabled user's workers: their token is the endpoint's, not a key, and outlived the
user's keys; now their calls are refused as the keys are, and work again once the user is
enabled. The leader's loops, woken by the disable, stop the workers the server runs for them
and start them again once they are enabled. In process, with the real routes and loops."""

from __future__ import annotations

import sys
from pathlib import Path

from eventually import eventually_async
from in_process import ADMIN_KEY, InProcess, running
from skiff.domain.placement import BlockerCause

#: A worker that runs until it is ended (it never calls in).
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


async def bobs_endpoint(app: InProcess, command: list[str], **fields: int) -> tuple[str, str]:
    """A user bob, made by the administrator, and an endpoint of his running ``command``:
    bob's id and the endpoint's."""
    key, bob_id = await app.new_user("bob")
    async with app.as_user(key) as bob:
        template = await bob.post(
            "/v1/templates", json={"name": "t", "imageName": "local/w", "dockerStartCmd": command}
        )
        body = {"templateId": template.json()["id"], "computeType": "CPU", **fields}
        made = await bob.post("/v1/endpoints", json=body)
        assert made.status_code == 200, made.text
    return bob_id, str(made.json()["id"])


async def test_a_disabled_users_workers_are_refused_until_the_user_is_enabled_again(
    tmp_path: Path,
) -> None:
    async with running(tmp_path / "data", take_wait_seconds=0.1) as app:
        bob_id, endpoint_id = await bobs_endpoint(app, ["python"], workersMax=0)
        admin = await app.services.auth.authenticate(ADMIN_KEY)
        take = f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0"
        async with await app.worker(endpoint_id) as worker:
            assert (await worker.get(take)).status_code == 204

            await app.services.accounts.set_disabled(admin, bob_id, True)
            refused = await worker.get(take)
            assert refused.status_code == 401, refused.text
            assert "disabled" in refused.text
            pinged = await worker.get(f"/v2/{endpoint_id}/ping/w-1")
            assert pinged.status_code == 401

            await app.services.accounts.set_disabled(admin, bob_id, False)
            assert (await worker.get(take)).status_code == 204


async def test_disabling_a_user_wakes_the_leader_to_stop_their_workers_and_enabling_to_start_them(
    tmp_path: Path,
) -> None:
    # The scaler's own period is an hour: only the wake-ups of the disable and the enable make
    # it act in time.
    async with running(tmp_path / "data", scaler_interval_seconds=3600) as app:
        bob_id, endpoint_id = await bobs_endpoint(app, SLEEPER, workersMin=1, workersMax=1)
        admin = await app.services.auth.authenticate(ADMIN_KEY)
        provider = app.services.fleet.provider
        await eventually_async(lambda: len(provider.running()) == 1, "bob's worker to start")

        await app.services.accounts.set_disabled(admin, bob_id, True)
        await eventually_async(lambda: provider.running() == [], "bob's worker to be stopped")
        # Why nothing runs, as /health and a queued job's status tell a published model's
        # callers (the owner's own keys are refused meanwhile).
        endpoint = await app.services.store.get_endpoint(endpoint_id)
        assert endpoint is not None
        blocker = await app.services.placement.why(endpoint)
        assert blocker is not None and blocker.cause is BlockerCause.OWNER_DISABLED

        # Its record goes once its exit is handled: until then it counts against workersMax,
        # and with no wake-up after the enable only the hourly pass would start another.
        async def forgotten() -> bool:
            return await app.services.workers.of_endpoint(endpoint_id) == []

        await eventually_async(forgotten, "bob's stopped worker to be forgotten")

        await app.services.accounts.set_disabled(admin, bob_id, False)
        await eventually_async(lambda: len(provider.running()) == 1, "bob's worker to start again")
