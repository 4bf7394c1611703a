"""A disabled user's workers: their token is the endpoint's, not a key, and outlived the
user's keys; now their calls are refused as the keys are, and work again once the user is
enabled. In process, with the real routes."""

from __future__ import annotations

from pathlib import Path

from in_process import ADMIN_KEY, running


async def test_a_disabled_users_workers_are_refused_until_the_user_is_enabled_again(
    tmp_path: Path,
) -> None:
    async with running(tmp_path / "data", take_wait_seconds=0.1) as app:
        key, bob_id = await app.new_user("bob")
        async with app.as_user(key) as bob:
            template = await bob.post(
                "/v1/templates",
                json={"name": "t", "imageName": "local/w", "dockerStartCmd": ["python"]},
            )
            made = await bob.post(
                "/v1/endpoints",
                json={"templateId": template.json()["id"], "computeType": "CPU", "workersMax": 0},
            )
            endpoint_id = made.json()["id"]
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
