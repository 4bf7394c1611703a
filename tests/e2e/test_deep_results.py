"""A worker's result nested past skiff's JSON limit, on the wire: the job FAILS saying why (not
"the worker dropped this job"), the worker is told with a 400, and it goes on to the next job."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx
import pytest
from harness import Server

from skiff.domain.json_limits import MAX_JSON_DEPTH


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _worker_client(server: Server, endpoint_id: str) -> httpx.Client:
    """A raw HTTP worker's client, with the token `skiff worker-token` prints."""
    printed = subprocess.run(
        [
            *(sys.executable, "-m", "skiff", "worker-token", endpoint_id),
            *("--url", server.url, "--data-dir", str(server.data_dir)),
        ],
        env=server.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    env = dict(
        line.removeprefix("export ").partition("=")[::2] for line in printed.splitlines() if line
    )
    token = env["RUNPOD_AI_API_KEY"].strip("'")
    return httpx.Client(base_url=server.url, headers={"Authorization": token}, timeout=30)


def test_the_sdks_too_deep_result_fails_the_job_saying_so(
    server: Server, runpod_client: Any
) -> None:
    endpoint = server.create_endpoint("echo_worker.py", workersMax=1, idleTimeout=30)
    client = runpod_client.Endpoint(endpoint["id"])
    failed = server.http.post(
        f"/v2/{endpoint['id']}/runsync?wait=60000", json={"input": {"nest": 300}}
    ).json()
    assert failed["status"] == "FAILED", failed
    assert "nested deeper than 128 levels" in failed["error"]
    assert "output" not in failed
    # The worker goes on: its next job completes, with a result just within the limit.
    within = client.run_sync({"input": {"nest": MAX_JSON_DEPTH - 1}}, timeout=60)
    depth = 0
    while isinstance(within, list):
        within = within[0] if within else None
        depth += 1
    assert depth == MAX_JSON_DEPTH - 1


@pytest.mark.parametrize("route", ["job-done", "job-stream"])
def test_a_raw_worker_posting_a_too_deep_body_gets_a_400_and_its_job_fails(
    server: Server, route: str
) -> None:
    endpoint_id = server.create_endpoint("echo_worker.py", workersMax=0)["id"]
    job_id = server.http.post(f"/v2/{endpoint_id}/run", json={"input": {}}).json()["id"]
    worker = _worker_client(server, endpoint_id)
    taken = worker.get(f"/v2/{endpoint_id}/job-take/raw-deep-{route}?job_in_progress=0")
    assert taken.status_code == 200 and taken.json()["id"] == job_id
    body = b'{"output": ' + _deep(600) + b"}"
    answer = worker.post(f"/v2/{endpoint_id}/{route}/raw-deep-{route}/{job_id}", content=body)
    assert answer.status_code == 400, answer.text
    assert "nested deeper than" in answer.json()["error"]
    status = server.http.get(f"/v2/{endpoint_id}/status/{job_id}").json()
    assert status["status"] == "FAILED" and status["error"] == answer.json()["error"]
