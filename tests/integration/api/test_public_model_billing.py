"""What a public model's caller is billed for runs that do not end its job: one whose ttl runs
out while it runs (the job is removed rather than made final), and each attempt cut off by its
worker's loss before the job is queued again. Billed nothing before: a short ttl, or an input
that crashes the worker, ran a model for free. And a run that ended just before the server was
killed: billed by the store with its end, it is billed once when the next server starts."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest

from eventually import eventually_async
from in_process import InProcess, running
from pgtest import PG_DSN, fresh_schema
from skiff.clock import ManualClock
from skiff.domain.jobs import Job
from skiff.domain.workers import outside_key


async def _published(app: InProcess) -> tuple[str, str, str]:
    """A model of an endpoint without workers of its own (an hour to run a job), and a caller:
    the endpoint's id, the caller's key and id."""
    endpoint_id = (await app.create_endpoint(workersMax=0, executionTimeoutMs=3_600_000))["id"]
    published = await app.http.post("/v1/models", json={"modelId": "m1", "endpointId": endpoint_id})
    assert published.status_code in (200, 201), published.text
    key, user_id = await app.new_user("bob")
    return endpoint_id, key, user_id


async def _billed(app: InProcess, user_id: str) -> list[tuple[float, float | None]]:
    usages = await app.services.store.usages_of(user_id, 0, 4e9)
    return sorted((u.started_at, u.ended_at) for u in usages)


async def test_a_callers_job_removed_by_its_ttl_while_it_runs_is_billed_for_its_run(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    async with running(tmp_path / "data", clock=clock) as app:
        endpoint_id, key, bob_id = await _published(app)
        async with app.as_user(key) as caller:
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

        await eventually_async(lambda: _billed(app, bob_id), "the caller billed")
        assert await _billed(app, bob_id) == [(started, started + 601)]


async def test_each_attempt_a_lost_worker_cut_off_is_billed_to_the_caller(tmp_path: Path) -> None:
    """The worker comes back holding nothing (as one that crashed and restarted), twice: the
    job is queued again each time and fails on its third attempt. Three runs of 20 s."""
    clock = ManualClock()
    # The last take finds nothing: a short long-poll.
    async with running(tmp_path / "data", clock=clock, take_wait_seconds=0.1) as app:
        endpoint_id, key, bob_id = await _published(app)
        async with app.as_user(key) as caller:
            job_id = (await caller.post("/v2/m1/run", json={"input": {}})).json()["id"]
            take = f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0"
            async with await app.worker(endpoint_id) as worker:
                starts = [clock.now()]
                await worker.get(take)
                for _ in range(2):  # it lets go of the job and takes it again
                    clock.advance(20)
                    starts.append(clock.now())
                    await worker.get(take)
                clock.advance(20)
                await worker.get(take)  # let go once more: the third attempt fails the job
                status = (await caller.get(f"/v2/m1/status/{job_id}")).json()
        assert status["status"] == "FAILED"

        def three() -> Awaitable[bool]:
            async def check() -> bool:
                return len(await _billed(app, bob_id)) == 3

            return check()

        await eventually_async(three, "three attempts billed")
        assert await _billed(app, bob_id) == [(s, s + 20) for s in starts]


async def test_an_attempt_whose_worker_went_silent_is_billed_to_its_last_call_not_to_now(
    tmp_path: Path,
) -> None:
    """An outside worker (or one of a server that crashed) is found gone long after it last
    called in: its caller pays for the attempt up to that call, not for the silence after."""
    clock = ManualClock()
    async with running(tmp_path / "data", clock=clock, take_wait_seconds=0.1) as app:
        endpoint_id, key, bob_id = await _published(app)
        async with app.as_user(key) as caller:
            job_id = (await caller.post("/v2/m1/run", json={"input": {}})).json()["id"]
            async with await app.worker(endpoint_id) as worker:
                started = clock.now()
                taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0")
                assert taken.json()["id"] == job_id
                clock.advance(10)
                pinged = await worker.get(f"/v2/{endpoint_id}/ping/w-1?job_id={job_id}")
                assert pinged.status_code == 200, pinged.text
        clock.advance(app.services.settings.worker_silence_seconds + 100)
        lost = await app.services.dispatch.forget_silent_workers(
            app.services.settings.worker_silence_seconds
        )
        assert [w.id for w in lost] == [outside_key(endpoint_id, "w-1")]

        await eventually_async(lambda: _billed(app, bob_id), "the caller billed")
        assert await _billed(app, bob_id) == [(started, started + 10)]


@contextlib.asynccontextmanager
async def _database(name: str) -> AsyncIterator[dict[str, Any]]:
    """The settings of a database that outlives the servers started on it."""
    if name == "sqlite":
        yield {}
        return
    async with fresh_schema() as schema:
        yield {"database_url": PG_DSN, "database_schema": schema}


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
async def test_a_callers_job_finished_just_before_a_crash_is_billed_once_after_the_restart(
    tmp_path: Path, database: str
) -> None:
    """The server is killed (SIGKILL) right after the worker's result is committed: nothing it
    would do next in memory (the job's events and what their subscribers start) happens. The
    next server on the same database, leading from its start, has bob billed for the run, once,
    though the worker sends its result again (its answer was lost) and the leader's loops run."""
    clock = ManualClock()
    async with _database(database) as db:
        async with running(tmp_path / "data", clock=clock, **db) as app:
            endpoint_id, key, bob_id = await _published(app)
            async with app.as_user(key) as caller:
                job_id = (await caller.post("/v2/m1/run", json={"input": {}})).json()["id"]
            done = f"/v2/{endpoint_id}/job-done/w-1/{job_id}?isStream=false"
            async with await app.worker(endpoint_id) as worker:
                started = clock.now()
                await worker.get(f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0")
                clock.advance(7)

                def killed(job: Job, stop_worker: bool = False) -> None:
                    """The process is gone: nothing after the commit runs."""

                app.services.job_events.finished = killed  # type: ignore[method-assign]
                answered = await worker.post(done, json={"output": {"n": 1}})
                assert answered.status_code == 200, answered.text
            job = await app.services.store.get_job(endpoint_id, job_id)
            assert job is not None and job.status.value == "COMPLETED"

        clock.advance(30)
        async with running(tmp_path / "data", clock=clock, **db) as app:
            async with await app.worker(endpoint_id) as worker:
                again = await worker.post(done, json={"output": {"n": 1}})
                assert again.status_code == 200, again.text
            await app.services.meter.pass_once()
            await app.services.reaper.pass_once()
            assert await _billed(app, bob_id) == [(started, started + 7)]
