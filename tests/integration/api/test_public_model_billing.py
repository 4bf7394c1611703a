"""What a public model's caller is billed for a job whose ttl runs out while it runs: the time
it ran, though the job is removed rather than made final (``JobEvents.cut_short``). Billed
nothing before: a caller could have any run for free by setting a short ttl."""

from __future__ import annotations

from pathlib import Path

import httpx

from eventually import eventually_async
from in_process import ADMIN_KEY, running
from skiff.clock import ManualClock


async def test_a_callers_job_removed_by_its_ttl_while_it_runs_is_billed_for_its_run(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    async with running(tmp_path / "data", clock=clock) as app:
        # An hour to run: the job's ttl (10 minutes) ends it first.
        endpoint_id = (await app.create_endpoint(workersMax=0, executionTimeoutMs=3_600_000))["id"]
        published = await app.http.post(
            "/v1/models", json={"modelId": "m1", "endpointId": endpoint_id}
        )
        assert published.status_code in (200, 201), published.text
        admin = await app.services.auth.authenticate(ADMIN_KEY)
        bob = await app.services.accounts.create_user(admin, "bob")
        bob_id = (await app.services.auth.authenticate(bob.key)).id
        async with httpx.AsyncClient(
            transport=app.transport,
            base_url="http://skiff.test",
            headers={"Authorization": f"Bearer {bob.key}"},
        ) as caller:
            submitted = await caller.post(
                "/v2/m1/run", json={"input": {}, "policy": {"ttl": 600_000}}
            )
            job_id = submitted.json()["id"]
            async with await app.worker(endpoint_id) as worker:
                taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0")
                assert taken.json()["id"] == job_id
                started = clock.now()
                clock.advance(601)
                await app.services.reaper.pass_once()
                assert await app.services.store.get_job(endpoint_id, job_id) is None

        async def billed() -> list[tuple[float, float | None]]:
            usages = await app.services.store.usages_of(bob_id, 0, 4e9)
            return [(u.started_at, u.ended_at) for u in usages]

        await eventually_async(billed, "the caller billed")
        assert await billed() == [(started, started + 601)]
