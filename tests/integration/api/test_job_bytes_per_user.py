"""Each user's share of the database (``SKIFF_JOB_MB_PER_USER``, services/job_room.py): a
tenant queueing large inputs it never lets run is refused with 507 once its jobs hold its
share, keeping nothing of the refused request, while every other tenant's jobs are still
taken; what its workers write counts against the endpoint's owner and is refused only past
twice the share (its job fails); what is purged is given back. Through the real routes, in
process, on both stores, on an injected clock."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from in_process import InProcess, running, running_on
from integration.api.test_outside_worker_names import users_endpoint
from skiff.clock import ManualClock
from skiff.config import Settings
from skiff.domain.jobs import Job, JobStatus
from skiff.services.job_room import RETRY_AFTER_SECONDS
from skiff.services.reaper import ENDED_DELIVERY_KEPT_SECONDS

MIB = 1024 * 1024
STORES = pytest.mark.parametrize("store", ["sqlite", "postgresql"])


def large(n: int) -> dict[str, object]:
    """An input of about 300 KB: three fit in 1 MiB, a fourth does not."""
    return {"input": {"n": n, "blob": "x" * 300_000}}


async def counter(app: InProcess, name: str) -> float:
    """A counter's value on ``/metrics`` (``name`` with its ``_total``)."""
    text = (await app.http.get("/metrics")).text
    return next(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
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
            assert await counter(app, "skiff_jobs_refused_for_user_bytes_total") == 2

            # What is purged is given back, once the figure is read again.
            purged = await mallory.post(f"/v2/{mallorys_endpoint}/purge-queue")
            assert purged.json()["removed"] == 3
            clock.advance(1.0)
            again = await mallory.post(f"/v2/{mallorys_endpoint}/run", json=large(5))
            assert again.status_code == 200, again.text


@STORES
async def test_results_count_against_the_owner_and_are_refused_only_past_twice_the_share(
    store: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    async with running_on(store, tmp_path / "data", clock=clock, job_mb_per_user=1) as app:
        alice, endpoint_id = await users_endpoint(app, "alice")
        async with alice, await app.worker(endpoint_id) as worker:
            ids = [
                (await alice.post(f"/v2/{endpoint_id}/run", json={"input": {"n": n}})).json()["id"]
                for n in range(3)
            ]
            take = f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0"
            assert (await worker.get(take)).json()["id"] == ids[0]
            # Past the share but not twice it: kept, the work was accepted.
            done = await worker.post(
                f"/v2/{endpoint_id}/job-done/w-1/{ids[0]}?isStream=false",
                json={"output": {"text": "y" * (MIB + 1000)}},
            )
            assert done.status_code == 200, done.text
            clock.advance(1.0)
            refused = await alice.post(f"/v2/{endpoint_id}/run", json={"input": {"n": 9}})
            assert refused.status_code == 507, refused.text
            status = (await alice.get(f"/v2/{endpoint_id}/status/{ids[0]}")).json()
            assert status["status"] == "COMPLETED" and len(status["output"]["text"]) == MIB + 1000

            # Past twice the share: not kept, and the job fails saying why.
            assert (await worker.get(take)).json()["id"] == ids[1]
            too_much = await worker.post(
                f"/v2/{endpoint_id}/job-done/w-1/{ids[1]}?isStream=false",
                json={"output": {"text": "z" * (MIB + 1000)}},
            )
            assert too_much.status_code == 400, too_much.text
            status = (await alice.get(f"/v2/{endpoint_id}/status/{ids[1]}")).json()
            assert status["status"] == "FAILED" and "twice the share" in status["error"]

            # A stream chunk past it fails its job the same way.
            assert (await worker.get(take)).json()["id"] == ids[2]
            chunk = await worker.post(
                f"/v2/{endpoint_id}/job-stream/w-1/{ids[2]}?isStream=true",
                json={"output": "s" * (MIB + 1000)},
            )
            assert chunk.status_code == 400, chunk.text
            status = (await alice.get(f"/v2/{endpoint_id}/status/{ids[2]}")).json()
            assert status["status"] == "FAILED" and "twice the share" in status["error"]
            assert await counter(app, "skiff_results_refused_for_user_bytes_total") == 2


@STORES
async def test_a_public_models_caller_is_held_to_its_own_share_not_the_owners(
    store: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    async with running_on(store, tmp_path / "data", clock=clock, job_mb_per_user=1) as app:
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


#: What another user's worker may try against alice's share: a result or a stream chunk of
#: 1.5 MiB, sent through its own endpoint, naming alice's job or one of its own.
HOSTILE_WRITES = {
    "a result for alice's job": ("job-done", "alice"),
    "a stream chunk for alice's job": ("job-stream", "alice"),
    "a result for its own job": ("job-done", "mallory"),
    "a stream chunk for its own job": ("job-stream", "mallory"),
}


@STORES
@pytest.mark.parametrize("case", HOSTILE_WRITES, ids=list(HOSTILE_WRITES))
async def test_another_users_worker_writes_nothing_into_alices_share(
    store: str, case: str, tmp_path: Path
) -> None:
    """Whatever mallory's worker sends, through mallory's endpoint, counts against mallory (or
    nothing): alice's jobs are neither failed nor charged, and alice's next job is taken."""
    route, whose = HOSTILE_WRITES[case]
    clock = ManualClock()
    async with running_on(store, tmp_path / "data", clock=clock, job_mb_per_user=1) as app:
        mallory, mallorys_endpoint = await users_endpoint(app, "mallory")
        alice, alices_endpoint = await users_endpoint(app, "alice")
        async with mallory, alice, await app.worker(mallorys_endpoint) as worker:
            alices_job = (await alice.post(f"/v2/{alices_endpoint}/run", json=large(0))).json()[
                "id"
            ]
            own_job = (
                await mallory.post(f"/v2/{mallorys_endpoint}/run", json={"input": {}})
            ).json()["id"]
            take = f"/v2/{mallorys_endpoint}/job-take/w-1?job_in_progress=0"
            assert (await worker.get(take)).json()["id"] == own_job
            job_id = alices_job if whose == "alice" else own_job
            body: object = {"output": "m" * (3 * MIB // 2)}
            sent = await worker.post(f"/v2/{mallorys_endpoint}/{route}/w-1/{job_id}", json=body)
            assert sent.status_code in (200, 400), sent.text

            clock.advance(1.0)  # the figures read from the store again
            status = (await alice.get(f"/v2/{alices_endpoint}/status/{alices_job}")).json()
            assert status["status"] == "IN_QUEUE"
            for n in (1, 2):
                taken = await alice.post(f"/v2/{alices_endpoint}/run", json=large(n))
                assert taken.status_code == 200, taken.text
            # Mallory's own output counted against mallory.
            if whose == "mallory":
                refused = await mallory.post(f"/v2/{mallorys_endpoint}/run", json={"input": {}})
                assert refused.status_code == 507, refused.text


async def test_an_ended_deliverys_record_is_removed_by_the_reaper_a_day_after_it_ended(
    tmp_path: Path,
) -> None:
    """Kept a day without its payload (the status, attempts and last error, for whoever looks),
    then removed: ended deliveries no longer pile up for ever."""
    clock = ManualClock()
    async with running(tmp_path / "data", clock=clock) as app:
        endpoint_id = (await app.create_endpoint(workersMax=0))["id"]
        store = app.services.store
        await store.insert_job(
            Job(
                id="j-1",
                endpoint_id=endpoint_id,
                status=JobStatus.IN_QUEUE,
                input_json="{}",
                execution_timeout_ms=60_000,
                ttl_ms=7 * 86_400_000,
                low_priority=False,
                webhook="https://example.com/hook",
                s3_config_json=None,
                submitted_at=clock.now(),
                retention_ms=7 * 86_400_000,
            )
        )
        await store.claim_jobs(endpoint_id, "w-1", 1, clock.now(), clock.now() + 60)
        await store.finish_job("j-1", "w-1", JobStatus.COMPLETED, '"ok"', None, clock.now())
        [delivery] = await store.due_webhook_deliveries(clock.now(), 10)
        await store.record_webhook_attempt(delivery.id, "delivered", None, clock.now(), None)

        def kept() -> list[tuple[str, str]]:
            path = Settings(data_dir=tmp_path / "data").sqlite_path()
            with contextlib.closing(sqlite3.connect(path)) as conn:
                return conn.execute("SELECT status, payload FROM webhook_deliveries").fetchall()

        assert kept() == [("delivered", "")]
        clock.advance(ENDED_DELIVERY_KEPT_SECONDS - 1)
        await app.services.reaper.pass_once()
        assert kept() == [("delivered", "")]
        clock.advance(2)
        await app.services.reaper.pass_once()
        assert kept() == []
