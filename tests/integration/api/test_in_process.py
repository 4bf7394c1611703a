"""Both interfaces through the in-process layer (``conftest.py``): a job's whole life on ``/v2``
with an external worker speaking the worker protocol, and the ``/v1`` resources it needs,
without a socket or a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from in_process import InProcess, running
from skiff.clock import ManualClock
from skiff.domain.jobs import Job


async def test_a_job_runs_through_the_worker_protocol_and_its_result_is_read(
    in_process: InProcess,
) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    http = in_process.http
    submitted = await http.post(f"/v2/{endpoint_id}/run", json={"input": {"n": 1}})
    assert submitted.status_code == 200, submitted.text
    job_id = submitted.json()["id"]
    assert submitted.json()["status"] == "IN_QUEUE"

    async with await in_process.worker(endpoint_id) as worker:
        taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0")
        assert taken.status_code == 200, taken.text
        assert taken.json()["id"] == job_id and taken.json()["input"] == {"n": 1}
        running = (await http.get(f"/v2/{endpoint_id}/status/{job_id}")).json()
        assert running["status"] == "IN_PROGRESS"
        done = await worker.post(
            f"/v2/{endpoint_id}/job-done/w-1/{job_id}?isStream=false",
            json={"output": {"doubled": 2}},
        )
        assert done.status_code == 200, done.text

    status = (await http.get(f"/v2/{endpoint_id}/status/{job_id}")).json()
    assert status["status"] == "COMPLETED" and status["output"] == {"doubled": 2}
    health = (await http.get(f"/v2/{endpoint_id}/health")).json()
    assert health["jobs"]["completed"] == 1 and health["jobs"]["inQueue"] == 0


async def test_runsync_answers_once_the_worker_reports_within_the_wait(
    in_process: InProcess,
) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]

    async def work() -> None:
        async with await in_process.worker(endpoint_id) as worker:
            taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-2?job_in_progress=0")
            while taken.status_code == 204:
                taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-2?job_in_progress=0")
            job = taken.json()
            await worker.post(
                f"/v2/{endpoint_id}/job-done/w-2/{job['id']}?isStream=false",
                json={"output": job["input"]["word"].upper()},
            )

    working = asyncio.create_task(work())
    answer = await in_process.http.post(
        f"/v2/{endpoint_id}/runsync?wait=30000", json={"input": {"word": "sync"}}
    )
    await working
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "COMPLETED" and answer.json()["output"] == "SYNC"


async def test_cancel_retry_and_purge_act_on_the_queue(in_process: InProcess) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    http = in_process.http
    ids = [
        (await http.post(f"/v2/{endpoint_id}/run", json={"input": {"i": i}})).json()["id"]
        for i in range(3)
    ]
    cancelled = (await http.post(f"/v2/{endpoint_id}/cancel/{ids[0]}")).json()
    assert cancelled["status"] == "CANCELLED"
    refused = await http.post(f"/v2/{endpoint_id}/retry/{ids[0]}")
    assert refused.status_code == 400 and "FAILED or TIMED_OUT" in refused.json()["error"]
    purged = (await http.post(f"/v2/{endpoint_id}/purge-queue")).json()
    assert purged["removed"] == 2
    health = (await http.get(f"/v2/{endpoint_id}/health")).json()
    assert health["jobs"]["inQueue"] == 0 and health["jobs"]["cancelled"] == 1


@contextlib.asynccontextmanager
async def one_taken_job(
    in_process: InProcess, worker_id: str
) -> AsyncIterator[tuple[str, str, httpx.AsyncClient]]:
    """An endpoint without workers of its own, one job queued on it and taken by an outside
    worker ``worker_id``: the endpoint's and job's ids, and that worker's client."""
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    queued = await in_process.http.post(f"/v2/{endpoint_id}/run", json={"input": {}})
    async with await in_process.worker(endpoint_id) as worker:
        await worker.get(f"/v2/{endpoint_id}/job-take/{worker_id}?job_in_progress=0")
        yield endpoint_id, queued.json()["id"], worker


async def test_a_large_stream_chunk_is_kept_only_for_the_job_its_worker_runs(
    in_process: InProcess,
) -> None:
    """A chunk over 1 MB is split into pieces the store keeps: for the worker that runs the
    job. Another worker id (one made up with the endpoint's token) is answered as always for a
    job it does not run, and its 4 MB are not even read."""
    http = in_process.http
    big = {"output": "x" * (4 * 1024 * 1024)}
    async with one_taken_job(in_process, "w-4") as (endpoint_id, job_id, worker):
        foreign = await worker.post(f"/v2/{endpoint_id}/job-stream/w-made-up/{job_id}", json=big)
        assert foreign.status_code == 200, foreign.text
        mine = await worker.post(f"/v2/{endpoint_id}/job-stream/w-4/{job_id}", json=big)
        assert mine.status_code == 200, mine.text
    streamed = (await http.get(f"/v2/{endpoint_id}/stream/{job_id}")).json()["stream"]
    assert "".join(c["output"] for c in streamed) == big["output"]
    assert len(streamed) == 5  # 1 MB pieces, quotes included


async def test_a_stream_past_its_cap_fails_its_job_and_keeps_what_came_before(
    tmp_path: Path,
) -> None:
    """A worker streaming without end cannot fill the database's disk: the chunk that would
    take the job's stream past ``SKIFF_STREAM_MAX_MB`` is refused with the reason, the job
    FAILS with it, and the chunks before it are still read."""
    piece = {"output": "z" * (600 * 1024)}
    async with running(tmp_path / "data", stream_max_mb=1) as app:
        async with one_taken_job(app, "w-7") as (endpoint_id, job_id, worker):
            kept = await worker.post(f"/v2/{endpoint_id}/job-stream/w-7/{job_id}", json=piece)
            assert kept.status_code == 200, kept.text
            over = await worker.post(f"/v2/{endpoint_id}/job-stream/w-7/{job_id}", json=piece)
            assert over.status_code == 400
            reason = over.json()["error"]
            assert "1 MiB a job's stream may hold" in reason
            late = await worker.post(f"/v2/{endpoint_id}/job-stream/w-7/{job_id}", json=piece)
            assert late.status_code == 200  # the job is over: dropped as for any job it left
        streamed = (await app.http.get(f"/v2/{endpoint_id}/stream/{job_id}")).json()
        assert streamed["status"] == "FAILED" and streamed["error"] == reason
        assert [c["output"] for c in streamed["stream"]] == [piece["output"]]


async def test_a_result_too_costly_to_read_fails_its_job_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    """A body of tens of millions of tiny values (gigabytes once parsed) is read in the helper
    process, whose memory limit it passes: the job FAILS saying so, the worker is told with a
    400, and the server answers on as before."""
    many = b'{"output": [' + b",".join([b"0"] * 20_000_000) + b"]}"
    async with running(tmp_path / "data", large_body_memory_mb=768) as app:
        async with one_taken_job(app, "w-8") as (endpoint_id, job_id, worker):
            done = await worker.post(
                f"/v2/{endpoint_id}/job-done/w-8/{job_id}",
                content=many,
                headers={"Content-Type": "application/json"},
            )
            assert done.status_code == 400, done.text
        status = (await app.http.get(f"/v2/{endpoint_id}/status/{job_id}")).json()
        assert status["status"] == "FAILED"
        assert "result holds too many values to read" in status["error"]
        assert (await app.http.get(f"/v2/{endpoint_id}/health")).status_code == 200


async def test_a_large_result_is_taken_only_from_the_worker_that_runs_the_job(
    in_process: InProcess,
) -> None:
    """A result over 1 MB from another worker id (made up with the endpoint's token) is
    answered as always for a job it does not hold, unread; the worker that runs the job
    completes it with the same body."""
    http = in_process.http
    big = {"output": "y" * (2 * 1024 * 1024)}
    async with one_taken_job(in_process, "w-6") as (endpoint_id, job_id, worker):
        foreign = await worker.post(f"/v2/{endpoint_id}/job-done/w-other/{job_id}", json=big)
        assert foreign.status_code == 200, foreign.text
        status = (await http.get(f"/v2/{endpoint_id}/status/{job_id}")).json()
        assert status["status"] == "IN_PROGRESS"
        mine = await worker.post(f"/v2/{endpoint_id}/job-done/w-6/{job_id}", json=big)
        assert mine.status_code == 200, mine.text
    status = (await http.get(f"/v2/{endpoint_id}/status/{job_id}")).json()
    assert status["status"] == "COMPLETED" and status["output"] == big["output"]


async def test_a_ping_naming_one_id_thousands_of_times_renews_it_once(tmp_path: Path) -> None:
    """A ping's ids are renewed in a write every tenant's writes wait behind: each is taken
    once, and no more of them than a worker could hold."""
    clock = ManualClock()
    async with running(tmp_path / "data", clock=clock) as app:
        endpoint_id = (await app.create_endpoint(workersMax=0))["id"]
        queued = await app.http.post(f"/v2/{endpoint_id}/run", json={"input": {}})
        job_id = queued.json()["id"]
        store = app.services.store
        async with await app.worker(endpoint_id) as worker:
            await worker.get(f"/v2/{endpoint_id}/job-take/w-5?job_in_progress=0")
            taken = await store.get_job(endpoint_id, job_id)
            assert taken is not None and taken.lease_until is not None
            clock.advance(5)
            named = ",".join(["gone"] * 10_000 + [job_id])  # near the longest URL taken
            pinged = await worker.get(f"/v2/{endpoint_id}/ping/w-5?job_id={named}")
            assert pinged.status_code == 200, pinged.text
        renewed = await store.get_job(endpoint_id, job_id)
        assert renewed is not None and renewed.lease_until == taken.lease_until + 5


async def test_a_stream_is_read_in_order_and_ends_with_the_final_state(
    in_process: InProcess,
) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    http = in_process.http
    job_id = (await http.post(f"/v2/{endpoint_id}/run", json={"input": {}})).json()["id"]
    async with await in_process.worker(endpoint_id) as worker:
        await worker.get(f"/v2/{endpoint_id}/job-take/w-3?job_in_progress=0")
        for word in ("a", "b"):
            chunk = await worker.post(
                f"/v2/{endpoint_id}/job-stream/w-3/{job_id}?isStream=true",
                json={"output": word},
            )
            assert chunk.status_code == 200, chunk.text
        await worker.post(
            f"/v2/{endpoint_id}/job-done/w-3/{job_id}?isStream=true", json={"output": "ab"}
        )
    streamed = (await http.get(f"/v2/{endpoint_id}/stream/{job_id}")).json()
    assert [c["output"] for c in streamed["stream"]] == ["a", "b"]
    assert streamed["status"] == "COMPLETED"


async def test_the_interfaces_refuse_callers_without_a_key_in_their_own_shape(
    in_process: InProcess,
) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    job = await in_process.anonymous.post(f"/v2/{endpoint_id}/run", json={"input": {}})
    assert job.status_code == 401 and "error" in job.json()
    management = await in_process.anonymous.get("/v1/endpoints")
    assert management.status_code == 401 and "message" in management.json()
    worker = await in_process.anonymous.get(f"/v2/{endpoint_id}/job-take/w-4")
    assert worker.status_code == 401


async def test_management_resources_round_trip(in_process: InProcess) -> None:
    http = in_process.http
    endpoint = await in_process.create_endpoint(workersMax=0, name="round-trip")
    listed = (await http.get("/v1/endpoints")).json()
    assert [e["id"] for e in listed] == [endpoint["id"]]
    updated = await http.patch(f"/v1/endpoints/{endpoint['id']}", json={"workersMax": 2})
    assert updated.status_code == 200 and updated.json()["workersMax"] == 2
    assert (await http.delete(f"/v1/endpoints/{endpoint['id']}")).status_code in (200, 204)
    gone = await http.get(f"/v1/endpoints/{endpoint['id']}")
    assert gone.status_code == 404 and "message" in gone.json()


async def test_runsync_answers_from_its_submission_and_its_job_done_without_a_read(
    in_process: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own submission says it is queued, and the job-done's write on this replica gives the
    final job: neither needs a read (docs/performance.md)."""
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    store = in_process.services.store
    reads: list[str] = []
    real_get_job = store.get_job

    async def counted(endpoint: str, job_id: str) -> Job | None:
        reads.append(job_id)
        return await real_get_job(endpoint, job_id)

    monkeypatch.setattr(store, "get_job", counted)

    async def work() -> None:
        async with await in_process.worker(endpoint_id) as worker:
            for _ in range(20):  # bounded: a refused /runsync queues nothing to take
                taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-3?job_in_progress=0")
                if taken.status_code != 204:
                    break
            await worker.post(
                f"/v2/{endpoint_id}/job-done/w-3/{taken.json()['id']}?isStream=false",
                json={"output": "done"},
            )

    working = asyncio.create_task(work())
    answer = await in_process.http.post(
        f"/v2/{endpoint_id}/runsync?wait=30000", json={"input": {"n": 1}}
    )
    await working
    assert answer.json()["status"] == "COMPLETED", answer.text
    assert answer.json()["output"] == "done"
    assert reads == []
