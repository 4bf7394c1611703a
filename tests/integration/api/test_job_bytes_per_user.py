"""Each user's share of the database (``SKIFF_JOB_MB_PER_USER``, services/job_room.py): a
tenant queueing large inputs it never lets run is refused with 507 once its jobs hold its
share, keeping nothing of the refused request, while every other tenant's jobs are still
taken; results count too but are never refused; what is collected or purged is given back.
Through the real routes, in process, on both stores, on an injected clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from in_process import InProcess, running_on
from integration.api.test_outside_worker_names import users_endpoint
from skiff.clock import ManualClock
from skiff.services.job_room import RETRY_AFTER_SECONDS

MIB = 1024 * 1024
STORES = pytest.mark.parametrize("store", ["sqlite", "postgresql"])


def large(n: int) -> dict[str, object]:
    """An input of about 300 KB: three fit in 1 MiB, a fourth does not."""
    return {"input": {"n": n, "blob": "x" * 300_000}}


async def refused_total(app: InProcess) -> float:
    text = (await app.http.get("/metrics")).text
    return next(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "skiff_jobs_refused_for_user_bytes_total"
    )


@STORES
async def test_a_tenant_past_its_share_is_refused_while_others_are_served(
    store: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    async with running_on(store, tmp_path / "data", clock=clock, job_mb_per_user=1) as app:
        mallory, mallorys_endpoint = await users_endpoint(app, "mallory")
        alice, alices_endpoint = await users_endpoint(app, "alice")
        async with mallory, alice:
            for n in range(3):
                queued = await mallory.post(f"/v2/{mallorys_endpoint}/run", json=large(n))
                assert queued.status_code == 200, queued.text
            refused = await mallory.post(f"/v2/{mallorys_endpoint}/run", json=large(3))
            assert refused.status_code == 507, refused.text
            assert refused.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
            assert "1 MiB one user may hold" in refused.json()["error"]
            clock.advance(1.0)  # read from the store again: the same figure
            refused_sync = await mallory.post(f"/v2/{mallorys_endpoint}/runsync", json=large(4))
            assert refused_sync.status_code == 507, refused_sync.text
            health = (await mallory.get(f"/v2/{mallorys_endpoint}/health")).json()
            assert health["jobs"]["inQueue"] == 3  # nothing of the refused ones kept

            # Another tenant is not held to mallory's figure.
            for n in range(3):
                taken = await alice.post(f"/v2/{alices_endpoint}/run", json=large(n))
                assert taken.status_code == 200, taken.text
            assert await refused_total(app) == 2

            # What is purged is given back, once the figure is read again.
            purged = await mallory.post(f"/v2/{mallorys_endpoint}/purge-queue")
            assert purged.json()["removed"] == 3
            clock.advance(1.0)
            again = await mallory.post(f"/v2/{mallorys_endpoint}/run", json=large(5))
            assert again.status_code == 200, again.text


@STORES
async def test_results_count_against_the_submitter_but_are_never_refused(
    store: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    async with running_on(store, tmp_path / "data", clock=clock, job_mb_per_user=1) as app:
        alice, endpoint_id = await users_endpoint(app, "alice")
        async with alice, await app.worker(endpoint_id) as worker:
            job_id = (await alice.post(f"/v2/{endpoint_id}/run", json={"input": {"n": 1}})).json()[
                "id"
            ]
            taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0")
            assert taken.json()["id"] == job_id
            # A result past the whole share is still recorded: the work was accepted.
            done = await worker.post(
                f"/v2/{endpoint_id}/job-done/w-1/{job_id}?isStream=false",
                json={"output": {"text": "y" * (MIB + 1000)}},
            )
            assert done.status_code == 200, done.text
            clock.advance(1.0)
            refused = await alice.post(f"/v2/{endpoint_id}/run", json={"input": {"n": 2}})
            assert refused.status_code == 507, refused.text
            status = (await alice.get(f"/v2/{endpoint_id}/status/{job_id}")).json()
            assert status["status"] == "COMPLETED" and len(status["output"]["text"]) == MIB + 1000


async def test_a_public_models_caller_is_held_to_its_own_share_not_the_owners(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    async with running_on("sqlite", tmp_path / "data", clock=clock, job_mb_per_user=1) as app:
        endpoint_id = (await app.create_endpoint(workersMax=0))["id"]
        published = await app.http.post(
            "/v1/models", json={"modelId": "m1", "endpointId": endpoint_id}
        )
        assert published.status_code in (200, 201), published.text
        bob_key, _ = await app.new_user("bob")
        carol_key, _ = await app.new_user("carol")
        async with app.as_user(bob_key) as bob, app.as_user(carol_key) as carol:
            for n in range(3):
                assert (await bob.post("/v2/m1/run", json=large(n))).status_code == 200
            assert (await bob.post("/v2/m1/run", json=large(3))).status_code == 507
            # Neither another caller nor the model's owner pays for bob's jobs.
            assert (await carol.post("/v2/m1/run", json=large(0))).status_code == 200
            owners = await app.http.post(f"/v2/{endpoint_id}/run", json=large(0))
            assert owners.status_code == 200, owners.text
