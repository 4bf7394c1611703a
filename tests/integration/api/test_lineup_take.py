"""The single job-take's answer shape with line-ups (services/lineup.py), through the in-process
app (``conftest.py``): a JSON list only for a runpod SDK that queues a list (User-Agent
``RunPod-Python-SDK/`` 1.12.0 or later) when jobs are lined up behind the one it takes; one
object, as the worker protocol says, for any other agent under the same conditions."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from in_process import InProcess
from skiff.services.lineup import MIN_SAMPLES

SDK_1_12 = "RunPod-Python-SDK/1.12.0 (Linux 6.1.0; x86_64) Language/Python 3.11.9"
SDK_1_13 = "RunPod-Python-SDK/1.13.2 (Linux 6.1.0; x86_64) Language/Python 3.12.1"
SDK_1_11 = "RunPod-Python-SDK/1.11.9 (Linux 6.1.0; x86_64) Language/Python 3.11.9"
#: Enough finished jobs for the endpoint's execution time to be trusted.
HISTORY = MIN_SAMPLES


@pytest.fixture
def in_process(in_process: InProcess) -> InProcess:
    """These workers speak the protocol by hand: taken for workers this server runs and so can
    end (only those get line-ups, services/dispatch.py)."""
    in_process.services.dispatch.can_end = lambda _worker: True
    return in_process


async def _submit(in_process: InProcess, endpoint_id: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        response = await in_process.http.post(f"/v2/{endpoint_id}/run", json={"input": {"i": i}})
        assert response.status_code == 200, response.text
        ids.append(str(response.json()["id"]))
    return ids


async def _take(
    worker: httpx.AsyncClient, endpoint_id: str, worker_id: str, agent: str, in_progress: int = 0
) -> Any:
    taken = await worker.get(
        f"/v2/{endpoint_id}/job-take/{worker_id}?job_in_progress={in_progress}",
        headers={"User-Agent": agent},
    )
    assert taken.status_code == 200, taken.text
    return taken.json()


async def _done(worker: httpx.AsyncClient, endpoint_id: str, worker_id: str, job_id: str) -> None:
    done = await worker.post(
        f"/v2/{endpoint_id}/job-done/{worker_id}/{job_id}?isStream=false", json={"output": 1}
    )
    assert done.status_code == 200, done.text


async def _with_history(
    in_process: InProcess, worker: httpx.AsyncClient, endpoint_id: str, worker_id: str, agent: str
) -> None:
    """Jobs of the endpoint run one at a time by this worker until it has history; a take with
    nothing else queued gets one object even from an SDK that accepts lists."""
    for _ in range(HISTORY):
        (job_id,) = await _submit(in_process, endpoint_id, 1)
        taken = await _take(worker, endpoint_id, worker_id, agent)
        assert isinstance(taken, dict) and taken["id"] == job_id
        await _done(worker, endpoint_id, worker_id, job_id)


async def _status(in_process: InProcess, endpoint_id: str, job_id: str) -> dict[str, Any]:
    return dict((await in_process.http.get(f"/v2/{endpoint_id}/status/{job_id}")).json())


@pytest.mark.parametrize("agent", [SDK_1_12, SDK_1_13])
async def test_an_sdk_from_1_12_with_history_and_a_queue_gets_a_list_of_lined_up_jobs(
    in_process: InProcess, agent: str
) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    async with await in_process.worker(endpoint_id) as worker:
        await _with_history(in_process, worker, endpoint_id, "w-new", agent)
        ids = await _submit(in_process, endpoint_id, 4)
        taken = await _take(worker, endpoint_id, "w-new", agent)
    assert isinstance(taken, list)
    assert [job["id"] for job in taken] == ids
    assert [job["input"] for job in taken] == [{"i": i} for i in range(4)]
    first = await _status(in_process, endpoint_id, ids[0])
    assert first["status"] == "IN_PROGRESS" and first["workerId"] == "w-new"
    for job_id in ids[1:]:
        lined_up = await _status(in_process, endpoint_id, job_id)
        assert lined_up["status"] == "IN_QUEUE" and "workerId" not in lined_up


@pytest.mark.parametrize(
    "agent", [SDK_1_11, "RunPod-Python-SDK/0.9.0", "python-httpx/0.28.1", "my-own-worker/1.12.0"]
)
async def test_an_older_sdk_or_another_agent_gets_one_object_under_the_same_conditions(
    in_process: InProcess, agent: str
) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    async with await in_process.worker(endpoint_id) as worker:
        await _with_history(in_process, worker, endpoint_id, "w-old", agent)
        ids = await _submit(in_process, endpoint_id, 4)
        taken = await _take(worker, endpoint_id, "w-old", agent)
        assert isinstance(taken, dict) and taken["id"] == ids[0]
        # Nothing was lined up behind it: another worker takes the next job.
        other = await _take(worker, endpoint_id, "w-other", SDK_1_11)
    assert isinstance(other, dict) and other["id"] == ids[1]
    for job_id in ids[2:]:
        assert (await _status(in_process, endpoint_id, job_id))["status"] == "IN_QUEUE"
    health = (await in_process.http.get(f"/v2/{endpoint_id}/health")).json()["jobs"]
    assert health["inProgress"] == 2 and health["inQueue"] == 2


async def test_an_sdk_from_1_12_gets_one_object_before_the_endpoint_has_history(
    in_process: InProcess,
) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    async with await in_process.worker(endpoint_id) as worker:
        for _ in range(HISTORY - 1):
            (job_id,) = await _submit(in_process, endpoint_id, 1)
            await _take(worker, endpoint_id, "w-new", SDK_1_12)
            await _done(worker, endpoint_id, "w-new", job_id)
        ids = await _submit(in_process, endpoint_id, 4)
        taken = await _take(worker, endpoint_id, "w-new", SDK_1_12)
    assert isinstance(taken, dict) and taken["id"] == ids[0]
    for job_id in ids[1:]:
        assert (await _status(in_process, endpoint_id, job_id))["status"] == "IN_QUEUE"


async def test_an_sdk_from_1_12_that_says_it_holds_a_job_gets_one_object(
    in_process: InProcess,
) -> None:
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    async with await in_process.worker(endpoint_id) as worker:
        await _with_history(in_process, worker, endpoint_id, "w-new", SDK_1_12)
        ids = await _submit(in_process, endpoint_id, 4)
        taken = await _take(worker, endpoint_id, "w-new", SDK_1_12, in_progress=1)
    assert isinstance(taken, dict) and taken["id"] == ids[0]
    for job_id in ids[1:]:
        assert (await _status(in_process, endpoint_id, job_id))["status"] == "IN_QUEUE"


async def test_a_worker_this_server_cannot_end_gets_one_object_even_from_an_sdk_from_1_12(
    in_process: InProcess,
) -> None:
    # An external worker: a job cancelled in its line-up could not be kept from starting.
    in_process.services.dispatch.can_end = lambda _worker: False
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    async with await in_process.worker(endpoint_id) as worker:
        await _with_history(in_process, worker, endpoint_id, "w-external", SDK_1_12)
        ids = await _submit(in_process, endpoint_id, 4)
        taken = await _take(worker, endpoint_id, "w-external", SDK_1_12)
    assert isinstance(taken, dict) and taken["id"] == ids[0]
    for job_id in ids[1:]:
        assert (await _status(in_process, endpoint_id, job_id))["status"] == "IN_QUEUE"
