"""Workers on a simulated mixed GPU fleet: placement in priority order, fallback, throttling
and recovery, pinning, and never one GPU for two workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness import Server, running

RTX = "NVIDIA GeForce RTX 4090"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    fleet_env: dict[str, str | None] = {"SKIFF_GPUS": f"{RTX}:2,{H100}:1"}
    with running(tmp_path_factory.mktemp("fleet") / "data", env=fleet_env) as server:
        yield server


def gpu_endpoint(server: Server, types: list[str], **fields: Any) -> str:
    fields.setdefault("idleTimeout", 60)
    endpoint = server.create_endpoint(
        "gpu_worker.py", computeType="GPU", gpuTypeIds=types, **fields
    )
    return str(endpoint["id"])


def workers_of(server: Server, eid: str) -> list[dict[str, Any]]:
    body = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"}).json()
    return list(body.get("workers", []))


def all_gpu_ids(server: Server) -> list[str]:
    ids: list[str] = []
    for endpoint in server.http.get("/v1/endpoints", params={"includeWorkers": "true"}).json():
        for worker in endpoint.get("workers", []):
            if worker.get("gpuIds") and worker["state"] != "throttled":
                ids.extend(worker["gpuIds"].split(","))
    return ids


def runsync(server: Server, eid: str, body: dict[str, Any]) -> dict[str, Any]:
    response = server.http.post(f"/v2/{eid}/runsync", json={"input": body}, timeout=120)
    return dict(response.json())


def test_a_worker_gets_the_first_listed_type_and_is_pinned_to_it(fleet: Server) -> None:
    eid = gpu_endpoint(fleet, [H100, RTX], workersMax=1)
    out = runsync(fleet, eid, {})
    assert out["status"] == "COMPLETED"
    assert out["output"]["cuda"] == "2" and out["output"]["nvidia"] == "2"
    (worker,) = workers_of(fleet, eid)
    assert worker["gpu"] == H100 and worker["gpuIds"] == "2"
    fleet.http.delete(f"/v1/endpoints/{eid}")


def test_gpu_count_pins_that_many_gpus_of_one_type(fleet: Server) -> None:
    eid = gpu_endpoint(fleet, [RTX], gpuCount=2, workersMax=1)
    out = runsync(fleet, eid, {})
    assert out["output"]["cuda"] == "0,1"
    fleet.http.delete(f"/v1/endpoints/{eid}")


def test_falls_back_to_the_next_type_then_throttles_and_recovers(fleet: Server) -> None:
    holder = gpu_endpoint(fleet, [H100], workersMin=1, workersMax=1)
    fleet.wait_for(
        lambda: any(w["state"] == "idle" for w in workers_of(fleet, holder)), what="H100 holder"
    )
    fallback = gpu_endpoint(fleet, [H100, RTX], workersMax=1)
    out = runsync(fleet, fallback, {})
    assert out["output"]["cuda"] in ("0", "1")  # an RTX 4090: the H100 is taken

    starved = gpu_endpoint(fleet, [H100], workersMax=1)
    job = fleet.http.post(f"/v2/{starved}/run", json={"input": {}}).json()
    fleet.wait_for(
        lambda: fleet.http.get(f"/v2/{starved}/health").json()["workers"]["throttled"] == 1,
        what="a throttled worker",
    )
    assert [w["state"] for w in workers_of(fleet, starved)] == ["throttled"]
    assert fleet.http.get(f"/v2/{starved}/status/{job['id']}").json()["status"] == "IN_QUEUE"
    assert len(all_gpu_ids(fleet)) == len(set(all_gpu_ids(fleet)))

    # The H100 frees up: the throttled worker starts on it and the job completes.
    fleet.http.patch(f"/v1/endpoints/{holder}", json={"workersMin": 0, "idleTimeout": 1})
    fleet.wait_for(
        lambda: fleet.http.get(f"/v2/{starved}/status/{job['id']}").json()["status"] == "COMPLETED",
        timeout=60,
        what="the starved job to complete",
    )
    done = fleet.http.get(f"/v2/{starved}/status/{job['id']}").json()
    assert done["output"]["cuda"] == "2"
    for eid in (holder, fallback, starved):
        fleet.http.delete(f"/v1/endpoints/{eid}")


def test_a_gpu_endpoint_on_a_full_fleet_never_takes_a_held_gpu(fleet: Server) -> None:
    big = gpu_endpoint(fleet, [RTX, H100], workersMin=3, workersMax=3)
    fleet.wait_for(
        lambda: sum(w["state"] == "idle" for w in workers_of(fleet, big)) == 3,
        what="three workers on three GPUs",
    )
    extra = gpu_endpoint(fleet, [RTX, H100], workersMin=1, workersMax=1)
    fleet.wait_for(
        lambda: [w["state"] for w in workers_of(fleet, extra)] == ["throttled"],
        what="the fourth worker throttled",
    )
    ids = all_gpu_ids(fleet)
    assert sorted(ids) == ["0", "1", "2"]
    for eid in (big, extra):
        fleet.http.delete(f"/v1/endpoints/{eid}")


def test_a_worker_killed_mid_job_has_its_job_finished_by_another(fleet: Server) -> None:
    eid = fleet.create_endpoint("gpu_worker.py", workersMax=1, idleTimeout=60)["id"]
    job = fleet.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 3}}).json()
    fleet.wait_for(
        lambda: fleet.http.get(f"/v2/{eid}/status/{job['id']}").json()["status"] == "IN_PROGRESS",
        what="IN_PROGRESS",
    )
    (worker,) = workers_of(fleet, eid)
    os.kill(worker["pid"], signal.SIGKILL)
    fleet.wait_for(
        lambda: fleet.http.get(f"/v2/{eid}/status/{job['id']}").json()["status"] == "COMPLETED",
        timeout=60,
        what="the job to complete on a new worker",
    )
    done = fleet.http.get(f"/v2/{eid}/status/{job['id']}").json()
    assert done["retries"] == 1
    assert done["workerId"] != worker["id"] and done["output"]["pid"] != worker["pid"]


def test_a_crash_looping_worker_is_backed_off_and_marked_unhealthy(fleet: Server) -> None:
    eid = fleet.create_endpoint("crash_worker.py", workersMax=1)["id"]
    fleet.http.post(f"/v2/{eid}/run", json={"input": {}})
    failure = fleet.wait_for(
        lambda: fleet.http.get(f"/v1/endpoints/{eid}").json().get("lastWorkerFailure"),
        what="a recorded failure",
    )
    assert "exited with code 3" in failure["error"]
    assert any("missing.safetensors" in line for line in failure["lastLogLines"])
    fleet.wait_for(
        lambda: fleet.http.get(f"/v2/{eid}/health").json()["workers"]["unhealthy"] == 1,
        what="an unhealthy worker",
    )
    time.sleep(6)  # deliberate: the window in which the tries are counted
    failed = fleet.http.get(f"/v1/endpoints/{eid}").json()["lastWorkerFailure"]["failedStarts"]
    # Backed off exponentially (1, 2, 4 s ...): a handful of tries, not one every second.
    assert 2 <= failed <= 4
    fleet.http.delete(f"/v1/endpoints/{eid}")


def test_a_burst_of_200_jobs_never_gets_more_than_workers_max(fleet: Server) -> None:
    eid = fleet.create_endpoint(
        "echo_worker.py", workersMax=3, idleTimeout=2, scalerType="REQUEST_COUNT", scalerValue=1
    )["id"]
    ids = [
        fleet.http.post(f"/v2/{eid}/run", json={"input": {"i": i}}).json()["id"] for i in range(200)
    ]
    most = 0

    def all_done_counting_workers() -> bool:
        nonlocal most
        most = max(most, len(workers_of(fleet, eid)))
        return bool(fleet.http.get(f"/v2/{eid}/health").json()["jobs"]["completed"] == len(ids))

    fleet.wait_for(all_done_counting_workers, timeout=240, interval=0.2, what="200 jobs done")
    assert 1 <= most <= 3
    fleet.wait_for(lambda: workers_of(fleet, eid) == [], timeout=30, what="scale to zero")


def test_skiff_gpus_lists_the_fleet_and_who_holds_each(fleet: Server) -> None:
    eid = gpu_endpoint(fleet, [H100], workersMin=1, workersMax=1)
    fleet.wait_for(lambda: any(w["state"] == "idle" for w in workers_of(fleet, eid)), what="idle")
    out = subprocess.run(
        [sys.executable, "-m", "skiff", "gpus", "--data-dir", str(fleet.data_dir)],
        env=fleet.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert H100 in rows["2"] and eid in rows["2"]
    assert rows["0"].rstrip().endswith("-") and RTX in rows["0"]
    fleet.http.delete(f"/v1/endpoints/{eid}")


def test_a_malformed_gpu_declaration_stops_serve_with_a_clear_message(tmp_path: Any) -> None:
    env = {**os.environ, "SKIFF_GPUS": "NVIDIA H100:many"}
    result = subprocess.run(
        [sys.executable, "-m", "skiff", "serve", "--data-dir", str(tmp_path), "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "count is not a number" in result.stderr
