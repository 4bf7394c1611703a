"""The unmodified runpod SDK as client, against unmodified runpod-SDK workers skiff starts,
through both ways into a ``/v2`` handler (api/v2.py): skiff's fast HTTP protocol, and uvicorn's
own with the ASGI app (``SKIFF_FAST_HTTP=0``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness import Server, running


@pytest.fixture(scope="module", params=["fast-http", "asgi"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env: dict[str, str | None] = {
        "SKIFF_FAST_HTTP": "0" if request.param == "asgi" else None,
        # Short, so that test_the_server_speaks_the_protocol_it_was_asked_for is quick; the
        # SDK sends each request head whole, so nothing else meets it.
        "SKIFF_HEADER_TIMEOUT_SECONDS": "2",
    }
    with running(tmp_path_factory.mktemp("skiff") / "data", env=env) as srv:
        yield srv


def test_the_server_speaks_the_protocol_it_was_asked_for(
    server: Server, request: pytest.FixtureRequest
) -> None:
    # Only skiff's protocol keeps the connection rules: a request head that never ends is
    # cut off after the header timeout there, and waited for by uvicorn's own.
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /v2/ep/health HTTP/1.1\r\nHost: x\r\n")
        try:
            answer: bytes | None = sock.recv(1024)
        except TimeoutError:
            answer = None
    if "asgi" in request.node.callspec.id:
        assert answer is None
    else:
        assert answer is not None and (answer == b"" or answer.startswith(b"HTTP/1.1 408 "))


@pytest.fixture(scope="module")
def echo(server: Server, runpod_client: Any) -> Any:
    endpoint = server.create_endpoint("echo_worker.py", workersMax=2, idleTimeout=30)
    return runpod_client.Endpoint(endpoint["id"])


@pytest.fixture(scope="module")
def streamer(server: Server, runpod_client: Any) -> Any:
    endpoint = server.create_endpoint("stream_worker.py", workersMax=1, idleTimeout=30)
    return runpod_client.Endpoint(endpoint["id"])


@pytest.fixture(scope="module")
def parked(server: Server, runpod_client: Any) -> Any:
    """An endpoint with no workers at all: its jobs stay queued."""
    endpoint = server.create_endpoint("echo_worker.py", workersMax=0)
    return runpod_client.Endpoint(endpoint["id"])


def test_run_sync_returns_the_handler_output(echo: Any) -> None:
    assert echo.run_sync({"prompt": "hello"}, timeout=90) == {"echo": {"prompt": "hello"}}


def test_run_then_output_returns_the_result(echo: Any) -> None:
    job = echo.run({"input": {"n": 7}})
    assert job.output(timeout=90) == {"echo": {"n": 7}}
    assert job.status() == "COMPLETED"


def test_status_reports_delay_and_execution_time(server: Server, echo: Any) -> None:
    job = echo.run({"n": 1})
    job.output(timeout=90)
    body = server.http.get(f"/v2/{echo.endpoint_id}/status/{job.job_id}").json()
    assert body["status"] == "COMPLETED"
    assert body["delayTime"] >= 0 and body["executionTime"] >= 0
    assert body["output"] == {"echo": {"n": 1}}


def test_stream_yields_every_chunk_once_in_order(streamer: Any) -> None:
    job = streamer.run({"chunks": 6, "pause": 0.3})
    chunks = list(job.stream())
    assert chunks == [{"index": i, "text": f"chunk-{i}"} for i in range(6)]
    assert job.status() == "COMPLETED"


def test_failing_handler_marks_the_job_failed_with_its_error(server: Server, echo: Any) -> None:
    job = echo.run({"raise": "boom"})
    server.wait_for(lambda: job.status() == "FAILED", what="FAILED")
    body = server.http.get(f"/v2/{echo.endpoint_id}/status/{job.job_id}").json()
    assert isinstance(body["error"], str) and "boom" in body["error"]


def test_handler_returning_error_marks_the_job_failed(server: Server, echo: Any) -> None:
    job = echo.run({"error": "bad input"})
    server.wait_for(lambda: job.status() == "FAILED", what="FAILED")
    body = server.http.get(f"/v2/{echo.endpoint_id}/status/{job.job_id}").json()
    assert body["error"] == "bad input"


def test_progress_update_is_visible_while_the_job_runs(server: Server, echo: Any) -> None:
    job = echo.run({"progress": ["25%", "50%"], "progress_pause": 1.0, "sleep": 2})
    seen: list[Any] = []

    def progressed() -> bool:
        body = server.http.get(f"/v2/{echo.endpoint_id}/status/{job.job_id}").json()
        if body["status"] == "IN_PROGRESS" and "output" in body:
            seen.append(body["output"])
        return body["status"] == "COMPLETED"

    server.wait_for(progressed, what="job to complete")
    assert "25%" in seen or "50%" in seen
    assert job.output() == {"echo": {"progress": ["25%", "50%"], "progress_pause": 1.0, "sleep": 2}}


def test_cancel_of_a_queued_job_means_it_never_starts(server: Server, parked: Any) -> None:
    job = parked.run({"never": True})
    assert job.cancel() == {"id": job.job_id, "status": "CANCELLED"}
    body = server.http.get(f"/v2/{parked.endpoint_id}/status/{job.job_id}").json()
    assert body["status"] == "CANCELLED"
    assert "workerId" not in body


def test_cancel_of_a_running_job_stops_it(server: Server, echo: Any) -> None:
    job = echo.run({"sleep": 10})
    server.wait_for(lambda: job.status() == "IN_PROGRESS", what="IN_PROGRESS")
    assert job.cancel()["status"] == "CANCELLED"
    time.sleep(1)  # deliberate: a while for a worker that kept running to overwrite the cancel
    assert server.http.get(f"/v2/{echo.endpoint_id}/status/{job.job_id}").json()["status"] == (
        "CANCELLED"
    )


def test_purge_queue_removes_only_queued_jobs(server: Server, parked: Any) -> None:
    jobs = [parked.run({"i": i}) for i in range(3)]
    assert parked.purge_queue() == {"removed": 3, "status": "completed"}
    for job in jobs:
        assert server.http.get(f"/v2/{parked.endpoint_id}/status/{job.job_id}").status_code == 404


def test_health_counts_jobs_and_workers(server: Server, runpod_client: Any) -> None:
    endpoint = runpod_client.Endpoint(
        server.create_endpoint("echo_worker.py", workersMax=1, idleTimeout=30)["id"]
    )
    assert endpoint.run_sync({"a": 1}, timeout=90) == {"echo": {"a": 1}}
    failed = endpoint.run({"raise": "x"})
    server.wait_for(lambda: failed.status() == "FAILED", what="FAILED")
    health = endpoint.health()
    assert health["jobs"]["completed"] == 1
    assert health["jobs"]["failed"] == 1
    assert health["jobs"]["inQueue"] == 0 and health["jobs"]["inProgress"] == 0
    assert health["workers"]["idle"] + health["workers"]["running"] == 1


def test_queued_jobs_are_counted_in_health(parked: Any) -> None:
    jobs = [parked.run({"i": i}) for i in range(2)]
    assert parked.health()["jobs"]["inQueue"] == 2
    for job in jobs:
        job.cancel()
    assert parked.health()["jobs"]["inQueue"] == 0


def test_retry_requeues_a_failed_job_with_the_same_id(server: Server, echo: Any) -> None:
    job = echo.run({"raise": "once"})
    server.wait_for(lambda: job.status() == "FAILED", what="FAILED")
    response = server.http.post(f"/v2/{echo.endpoint_id}/retry/{job.job_id}")
    assert response.json() == {"id": job.job_id, "status": "IN_QUEUE"}
    completed = server.http.post(f"/v2/{echo.endpoint_id}/retry/{job.job_id}")
    assert completed.status_code in (200, 400)


def test_retry_of_a_completed_job_is_refused(server: Server, echo: Any) -> None:
    job = echo.run({"ok": 1})
    job.output(timeout=90)
    response = server.http.post(f"/v2/{echo.endpoint_id}/retry/{job.job_id}")
    assert response.status_code == 400
    assert "COMPLETED" in response.json()["error"]


def test_runsync_with_a_short_wait_answers_a_non_final_status(server: Server, echo: Any) -> None:
    response = server.http.post(
        f"/v2/{echo.endpoint_id}/runsync", params={"wait": 1000}, json={"input": {"sleep": 4}}
    )
    body = response.json()
    assert response.status_code == 200
    assert body["id"].startswith("sync-")
    assert body["status"] in ("IN_QUEUE", "IN_PROGRESS")
    server.wait_for(
        lambda: (
            server.http.get(f"/v2/{echo.endpoint_id}/status/{body['id']}").json()["status"]
            == "COMPLETED"
        ),
        what="sync job to finish",
    )


def test_a_job_longer_than_an_idle_connection_timeout_keeps_its_result(echo: Any) -> None:
    # A synchronous handler leaves the SDK's pooled connection idle while it runs; the
    # result must still arrive on it.
    assert echo.run_sync({"sleep": 8}, timeout=90) == {"echo": {"sleep": 8}}
