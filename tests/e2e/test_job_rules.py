"""The rules of the job interface that need a real worker: limits, timeouts, priorities,
secrets and big stream chunks, driven by the real runpod SDK."""

from __future__ import annotations

import concurrent.futures
import http.server
import threading
import time
from typing import Any

import orjson
import pytest
import standardwebhooks
from harness import Server


@pytest.fixture(scope="module")
def echo(server: Server, runpod_client: Any) -> Any:
    endpoint = server.create_endpoint("echo_worker.py", workersMax=1, idleTimeout=30)
    return runpod_client.Endpoint(endpoint["id"])


def _status(server: Server, endpoint_id: str, job_id: str) -> dict[str, Any]:
    return dict(server.http.get(f"/v2/{endpoint_id}/status/{job_id}").json())


def test_a_job_past_its_execution_timeout_is_timed_out_and_its_worker_replaced(
    server: Server, echo: Any
) -> None:
    job = echo.run({"input": {"sleep": 60}, "policy": {"executionTimeout": 5000}})
    started = time.monotonic()
    server.wait_for(lambda: job.status() == "TIMED_OUT", timeout=30, what="TIMED_OUT")
    assert time.monotonic() - started < 20
    # The synchronous handler cannot let go; its worker is ended and a new one serves.
    assert echo.run_sync({"after": 1}, timeout=90) == {"echo": {"after": 1}}


def test_run_body_over_10_mb_is_413_json(server: Server, echo: Any) -> None:
    body = orjson.dumps({"input": {"blob": "x" * (10 * 1024 * 1024)}})
    response = server.http.post(f"/v2/{echo.endpoint_id}/run", content=body)
    assert response.status_code == 413
    assert "10 MB" in response.json()["error"]


def test_runsync_accepts_15_mb_and_refuses_over_20_mb(server: Server, echo: Any) -> None:
    big = orjson.dumps({"input": {"blob": "x" * (21 * 1024 * 1024)}})
    refused = server.http.post(f"/v2/{echo.endpoint_id}/runsync", content=big)
    assert refused.status_code == 413
    assert "20 MB" in refused.json()["error"]
    ok = orjson.dumps({"input": {"size": 1, "pad": "y" * (15 * 1024 * 1024)}})
    accepted = server.http.post(
        f"/v2/{echo.endpoint_id}/runsync", params={"wait": 1000}, content=ok
    )
    assert accepted.status_code == 200


def test_low_priority_jobs_alone_never_start_a_worker(server: Server, runpod_client: Any) -> None:
    endpoint = server.create_endpoint("echo_worker.py", workersMax=1, idleTimeout=30)
    eid = endpoint["id"]
    low = server.http.post(
        f"/v2/{eid}/run", json={"input": {"low": 1}, "policy": {"lowPriority": True}}
    ).json()
    time.sleep(3)  # deliberate: a while in which no worker may start for it
    health = server.http.get(f"/v2/{eid}/health").json()
    assert sum(health["workers"].values()) == 0
    assert health["jobs"]["inQueue"] == 1
    normal = runpod_client.Endpoint(eid).run({"normal": 1})
    assert normal.output(timeout=90) == {"echo": {"normal": 1}}
    server.wait_for(
        lambda: _status(server, eid, low["id"])["status"] == "COMPLETED", what="the low job"
    )


def test_s3_config_reaches_the_worker_but_never_the_status(server: Server, echo: Any) -> None:
    s3 = {"accessId": "AK", "accessSecret": "SECRET", "bucketName": "b", "endpointUrl": "http://s3"}
    job = echo.run({"input": {"show_s3": True}, "s3Config": s3})
    assert job.output(timeout=90) == {"s3Config": s3}
    body = _status(server, echo.endpoint_id, job.job_id)
    assert "s3Config" not in body
    listed = server.http.get(f"/v2/{echo.endpoint_id}/requests").text
    assert "SECRET" not in listed


def test_a_stream_chunk_over_1_mb_is_split_and_joins_back(
    server: Server, runpod_client: Any
) -> None:
    endpoint = runpod_client.Endpoint(
        server.create_endpoint("stream_worker.py", workersMax=1, idleTimeout=30)["id"]
    )
    size = 2_500_000
    job = endpoint.run({"big_text": size})
    pieces = list(job.stream())
    assert len(pieces) >= 3
    assert all(len(orjson.dumps(p)) <= 1024 * 1024 for p in pieces)
    assert "".join(pieces) == "a" * size


def test_requests_lists_recent_jobs_newest_first_and_pages(server: Server) -> None:
    endpoint = server.create_endpoint("echo_worker.py", workersMax=0)
    eid = endpoint["id"]
    ids = [
        server.http.post(f"/v2/{eid}/run", json={"input": {"i": i}}).json()["id"] for i in range(5)
    ]
    first = server.http.get(f"/v2/{eid}/requests", params={"limit": 3}).json()
    assert [r["id"] for r in first["requests"]] == ids[::-1][:3]
    assert first["requests"][0]["status"] == "IN_QUEUE" and first["requests"][0]["submittedAt"]
    second = server.http.get(
        f"/v2/{eid}/requests", params={"limit": 3, "cursor": first["nextCursor"]}
    ).json()
    assert [r["id"] for r in second["requests"]] == ids[::-1][3:]
    assert second["nextCursor"] is None


def test_health_counts_are_exact_under_concurrent_submissions(server: Server) -> None:
    endpoint = server.create_endpoint("echo_worker.py", workersMax=0)
    eid = endpoint["id"]

    def submit(i: int) -> int:
        return server.http.post(f"/v2/{eid}/run", json={"input": {"i": i}}).status_code

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(submit, range(200)))
    assert codes == [200] * 200
    assert server.http.get(f"/v2/{eid}/health").json()["jobs"]["inQueue"] == 200
    assert server.http.post(f"/v2/{eid}/purge-queue").json() == {
        "removed": 200,
        "status": "completed",
    }


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((dict(self.headers.items()), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def test_a_finished_job_calls_its_webhook_signed_with_the_users_secret(
    server: Server, echo: Any
) -> None:
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
        s3 = {"accessId": "a", "accessSecret": "TOPSECRET", "bucketName": "b", "endpointUrl": "e"}
        job = echo.run({"input": {"hook": 1}, "webhook": url, "s3Config": s3})
        assert job.output(timeout=90) == {"echo": {"hook": 1}}
        server.wait_for(lambda: _Receiver.received, timeout=30, what="the webhook call")
        headers, body = _Receiver.received[0]
        secret = server.http.get("/v1/webhooksecret").json()["secret"]
        payload = standardwebhooks.Webhook(secret).verify(body, headers)
        assert payload["id"] == job.job_id and payload["status"] == "COMPLETED"
        assert payload["output"] == {"echo": {"hook": 1}} and payload["input"] == {"hook": 1}
        assert b"TOPSECRET" not in body
    finally:
        receiver.shutdown()


def test_over_the_rate_limit_is_429_with_retry_after(server: Server) -> None:
    eid = server.create_endpoint("echo_worker.py", workersMax=0)["id"]
    codes = [server.http.post(f"/v2/{eid}/purge-queue") for _ in range(3)]
    assert [c.status_code for c in codes] == [200, 200, 429]
    assert int(codes[2].headers["Retry-After"]) >= 1
    assert "purge-queue" in codes[2].json()["error"]


@pytest.mark.parametrize("wait", ["999", "300001", "soon"])
def test_runsync_wait_outside_its_range_is_400(server: Server, echo: Any, wait: str) -> None:
    response = server.http.post(
        f"/v2/{echo.endpoint_id}/runsync", params={"wait": wait}, json={"input": {}}
    )
    assert response.status_code == 400
    assert response.json()["field"] == "wait"


def test_cancel_of_a_running_job_replaces_a_worker_that_does_not_let_go(
    server: Server, echo: Any
) -> None:
    job = echo.run({"sleep": 60})
    server.wait_for(lambda: job.status() == "IN_PROGRESS", what="IN_PROGRESS")
    assert job.cancel() == {"id": job.job_id, "status": "CANCELLED"}
    # One worker at most: the next job runs only once the stuck one was ended and replaced.
    assert echo.run_sync({"next": 1}, timeout=90) == {"echo": {"next": 1}}
    assert job.status() == "CANCELLED"


def test_purge_queue_leaves_running_jobs_alone(server: Server, echo: Any) -> None:
    running = echo.run({"sleep": 3})
    server.wait_for(lambda: running.status() == "IN_PROGRESS", what="IN_PROGRESS")
    queued = [echo.run({"queued": i}) for i in range(2)]
    assert echo.purge_queue() == {"removed": 2, "status": "completed"}
    assert running.output(timeout=90) == {"echo": {"sleep": 3}}
    for job in queued:
        status = server.http.get(f"/v2/{echo.endpoint_id}/status/{job.job_id}")
        assert status.status_code == 404
