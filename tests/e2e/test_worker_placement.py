"""Workers that never call in, scale-downs of starting workers, the server-wide worker limit,
and endpoints saying why their workers are held back: a real ``skiff serve`` starting real
worker processes, read through /v1, /health and the runpod SDK."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import WORKERS, Server, running


def endpoint_view(server: Server, eid: str) -> dict[str, Any]:
    response = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"})
    assert response.status_code == 200, response.text
    return dict(response.json())


def health(server: Server, eid: str) -> dict[str, Any]:
    response = server.http.get(f"/v2/{eid}/health")
    assert response.status_code == 200, response.text
    return dict(response.json())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that ended but is not reaped yet still answers; its state says so.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture
def quick_deadline(tmp_path: Path) -> Iterator[Server]:
    with running(tmp_path / "data", env={"SKIFF_WORKER_START_TIMEOUT_SECONDS": "2"}) as server:
        yield server


def test_a_worker_that_never_calls_in_is_ended_at_the_deadline_as_a_failed_start(
    quick_deadline: Server,
) -> None:
    server = quick_deadline
    eid = server.create_endpoint("hung_worker.py", workersMin=1, workersMax=1)["id"]
    first = server.wait_for(
        lambda: [w for w in endpoint_view(server, eid)["workers"] if w.get("pid")],
        what="the hung worker to start",
    )[0]

    failure = server.wait_for(
        lambda: endpoint_view(server, eid).get("lastWorkerFailure"),
        timeout=30,
        what="the missed deadline to be recorded",
    )
    assert f"worker {first['id']} did not call in within 2 s of its start" in failure["error"]
    assert failure["failedStarts"] >= 1
    server.wait_for(lambda: not alive(first["pid"]), timeout=30, what="the hung process to end")
    placement = health(server, eid)["placement"]
    assert placement["cause"] == "failing-starts" and "did not call in" in placement["reason"]
    assert endpoint_view(server, eid)["placement"]["cause"] == "failing-starts"

    # Replaced once the back-off has passed: a new process, itself ended at its deadline.
    replacement = server.wait_for(
        lambda: [
            w
            for w in endpoint_view(server, eid)["workers"]
            if w["id"] != first["id"] and w.get("pid")
        ],
        timeout=30,
        what="a replacement worker",
    )[0]
    assert replacement["state"] == "initializing"
    assert "did not call in" in server.tail_log()


def test_workers_max_zero_ends_workers_that_are_still_starting(tmp_path: Path) -> None:
    with running(tmp_path / "data") as server:
        eid = server.create_endpoint("hung_worker.py", workersMin=3, workersMax=3)["id"]
        starting = server.wait_for(
            lambda: (
                (ws := [w for w in endpoint_view(server, eid)["workers"] if w.get("pid")])
                and len(ws) == 3
                and ws
            ),
            what="three starting workers",
        )
        assert {w["state"] for w in starting} == {"initializing"}

        response = server.http.patch(
            f"/v1/endpoints/{eid}", json={"workersMin": 0, "workersMax": 0}
        )
        assert response.status_code == 200, response.text

        server.wait_for(
            lambda: endpoint_view(server, eid).get("workers") == [],
            timeout=30,
            what="the starting workers to be gone",
        )
        assert not any(alive(w["pid"]) for w in starting)
        assert "lastWorkerFailure" not in endpoint_view(server, eid)


@pytest.fixture
def runpod_sdk() -> Iterator[Any]:
    """The runpod SDK as a client; its module-wide settings are put back afterwards."""
    import runpod

    saved = runpod.api_key, runpod.endpoint_url_base
    yield runpod
    runpod.api_key, runpod.endpoint_url_base = saved


def test_a_gpu_endpoint_on_a_server_without_that_gpu_says_why_in_v1_health_and_status(
    tmp_path: Path, runpod_sdk: Any
) -> None:
    with running(tmp_path / "data", env={"SKIFF_GPUS": None}) as server:
        eid = server.create_endpoint(
            "echo_worker.py", computeType="GPU", gpuTypeIds=["NVIDIA Imaginary 1"], workersMax=1
        )["id"]
        queued = server.http.post(f"/v2/{eid}/run", json={"input": {}})
        assert queued.status_code == 200

        view = endpoint_view(server, eid)
        assert view["placement"]["cause"] == "no-gpu"
        reason = view["placement"]["reason"]
        assert "needs a GPU among [NVIDIA Imaginary 1] and this server has" in reason

        # The SDK's health() hands back the JSON as the server sends it.
        runpod_sdk.api_key = server.key
        runpod_sdk.endpoint_url_base = f"{server.url}/v2"
        report = runpod_sdk.Endpoint(eid).health()
        assert report["placement"] == {"cause": "no-gpu", "reason": reason}
        assert report["jobs"]["inQueue"] == 1
        server.wait_for(
            lambda: health(server, eid)["workers"]["throttled"] == 1, what="a throttled worker"
        )
        # A new worker is recorded throttled before the fleet decides it cannot start and says
        # why, so the log line may come a moment after the count.
        said = f"endpoint {eid}: no worker can start"
        server.wait_for(lambda: said in server.log_path.read_text(), what="the reason logged")
        assert server.log_path.read_text().count(said) == 1

        # The queued job's own answers say it too: /status, and /runsync when its wait ends.
        status = server.http.get(f"/v2/{eid}/status/{queued.json()['id']}").json()
        assert status["status"] == "IN_QUEUE"
        assert status["placement"] == {"cause": "no-gpu", "reason": reason}
        waited = server.http.post(f"/v2/{eid}/runsync?wait=1000", json={"input": {}}).json()
        assert waited["status"] == "IN_QUEUE"
        assert waited["placement"] == {"cause": "no-gpu", "reason": reason}


def test_the_server_wide_worker_limit_holds_across_endpoints_and_says_so(tmp_path: Path) -> None:
    with running(tmp_path / "data", env={"SKIFF_MAX_WORKERS": "2"}) as server:
        first = server.create_endpoint(workersMin=2, workersMax=2, idleTimeout=60)["id"]
        second = server.create_endpoint(workersMin=2, workersMax=2, idleTimeout=60)["id"]

        def processes() -> list[dict[str, Any]]:
            return [
                w
                for eid in (first, second)
                for w in endpoint_view(server, eid)["workers"]
                if w["state"] not in ("throttled", "unhealthy")
            ]

        server.wait_for(
            lambda: sum(w["state"] == "idle" for w in processes()) == 2, what="two idle workers"
        )
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # deliberate: 3 s in which it must stay there
            assert len(processes()) <= 2
            time.sleep(0.2)

        held = [eid for eid in (first, second) if health(server, eid)["workers"]["throttled"]]
        assert held, "no endpoint is held back"
        throttled = sum(health(server, eid)["workers"]["throttled"] for eid in (first, second))
        assert throttled == 2
        for eid in held:
            placement = endpoint_view(server, eid)["placement"]
            assert placement["cause"] == "worker-limit"
            assert "its limit of 2 (SKIFF_MAX_WORKERS)" in placement["reason"]
            assert health(server, eid)["placement"] == placement
        assert "(SKIFF_MAX_WORKERS)" in server.tail_log()


def test_a_worker_that_dies_at_start_says_why_in_health_too(tmp_path: Path) -> None:
    """Not only /v1 and the console: /health, which the SDK's users read, names the failure."""
    with running(tmp_path / "data") as server:
        eid = server.create_endpoint("crash_worker.py", workersMax=1)["id"]
        server.http.post(f"/v2/{eid}/run", json={"input": {}})
        placement = server.wait_for(
            lambda: health(server, eid).get("placement"), what="a reason in /health"
        )
        assert placement["cause"] == "failing-starts"
        assert "exited with code 3 right after it started" in placement["reason"]
        assert endpoint_view(server, eid)["placement"] == placement


def test_a_worker_that_fails_on_import_names_the_error_in_a_queued_jobs_status_and_health(
    server: Server, runpod_client: Any
) -> None:
    """A worker run by an interpreter without ``runpod`` (``-S``: no site-packages): a job's
    client and /health read the ModuleNotFoundError, not only "exited with code 1"."""
    template = server.create_template(
        "echo_worker.py", dockerStartCmd=[sys.executable, "-S", str(WORKERS / "echo_worker.py")]
    )
    response = server.http.post(
        "/v1/endpoints", json={"templateId": template["id"], "computeType": "CPU", "workersMax": 1}
    )
    assert response.status_code == 200, response.text
    eid = response.json()["id"]
    endpoint = runpod_client.Endpoint(eid)
    job = endpoint.run({"n": 1})
    missing = "ModuleNotFoundError: No module named 'runpod'"

    def placement() -> Any:
        return server.http.get(f"/v2/{eid}/status/{job.job_id}").json().get("placement")

    shown = server.wait_for(
        lambda: (found := placement()) and missing in found["reason"] and found,
        what="the import error in the queued job's status",
    )
    assert shown["cause"] == "failing-starts"
    assert "exited with code 1 right after it started: " + missing in shown["reason"]
    assert job.status() == "IN_QUEUE"
    assert missing in endpoint.health()["placement"]["reason"]
    server.http.delete(f"/v1/endpoints/{eid}")


def test_a_failed_fitness_check_is_the_endpoints_failure_with_its_reason(server: Server) -> None:
    eid = server.create_endpoint("unfit_worker.py", workersMin=1, workersMax=1)["id"]
    failure = server.wait_for(
        lambda: endpoint_view(server, eid).get("lastWorkerFailure"), what="the failure"
    )
    assert "fitness check 'model_files_present' failed" in failure["error"], failure
    assert "model file /models/weights.safetensors not found" in failure["error"], failure
    # Its exit right after does not replace the reason the worker gave (a deliberate pause:
    # nothing to wait for when what is checked is that nothing changes).
    time.sleep(2)
    assert "fitness check" in endpoint_view(server, eid)["lastWorkerFailure"]["error"]
    server.http.delete(f"/v1/endpoints/{eid}")
