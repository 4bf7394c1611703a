"""Worker logs through the management API and ``skiff logs``: real runpod-SDK workers, their
output read back, filtered, followed, and kept to its owner."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from harness import Server

BANNER = "Starting Serverless Worker"


@pytest.fixture(scope="module")
def other_key(server: Server) -> str:
    """A second user's key, made with the CLI against the running server's data directory."""
    out = subprocess.run(
        [
            *(sys.executable, "-m", "skiff", "keys", "create", "--user", "carol"),
            *("--data-dir", str(server.data_dir)),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@pytest.fixture(scope="module")
def ran(server: Server) -> dict[str, Any]:
    """An endpoint whose worker ran one job: {"endpoint": ..., "job": ...}."""
    endpoint = server.create_endpoint(workersMax=1, idleTimeout=60)
    job = server.http.post(f"/v2/{endpoint['id']}/runsync", json={"input": {"hi": 1}}).json()
    assert job["status"] == "COMPLETED", job
    return {"endpoint": endpoint, "job": job}


def logs(server: Server, endpoint_id: str, **params: Any) -> list[dict[str, Any]]:
    response = server.http.get(f"/v1/endpoints/{endpoint_id}/logs", params=params)
    assert response.status_code == 200, response.text
    return list(response.json()["lines"])


def test_the_log_holds_the_workers_output(server: Server, ran: dict[str, Any]) -> None:
    eid, job = ran["endpoint"]["id"], ran["job"]
    lines = server.wait_for(
        lambda: (got := logs(server, eid)) and any(job["id"] in x["line"] for x in got) and got,
        what="the job's lines in the log",
    )
    assert any(BANNER in x["line"] for x in lines)
    assert {x["worker"] for x in lines} == {job["workerId"]}
    assert all(x["time"] and x["time"].endswith("Z") for x in lines)
    assert [x["time"] for x in lines] == sorted(x["time"] for x in lines)


def test_worker_since_and_tail_filter(server: Server, ran: dict[str, Any]) -> None:
    eid, worker = ran["endpoint"]["id"], ran["job"]["workerId"]
    everything = logs(server, eid)
    # An idle worker may still print now and then: later reads can only have more at the end.
    of_worker = logs(server, eid, worker=worker)
    assert of_worker[: len(everything)] == everything
    last_two = logs(server, eid, tail=2)
    assert len(last_two) == 2 and last_two[-1]["time"] >= everything[-1]["time"]
    cut = everything[len(everything) // 2]["time"]
    recent = logs(server, eid, since=cut)
    assert all(x["time"] >= cut for x in recent)
    expected = [x for x in everything if x["time"] >= cut]
    assert recent[: len(expected)] == expected
    assert logs(server, eid, since=str(time.time() + 3600)) == []
    bad_since = server.http.get(f"/v1/endpoints/{eid}/logs", params={"since": "yesterday"})
    assert bad_since.status_code == 400 and bad_since.json()["field"] == "since"
    unknown = server.http.get(f"/v1/endpoints/{eid}/logs", params={"worker": "nobody"})
    assert unknown.status_code == 404
    assert server.http.get(f"/v1/endpoints/{eid}/logs", params={"tail": 0}).status_code == 400


def follow(server: Server, endpoint_id: str, **params: Any) -> Iterator[dict[str, Any] | None]:
    """The followed log, one object per line; None for a keep-alive."""
    client = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=30
    )
    with (
        client,
        client.stream(
            "GET", f"/v1/endpoints/{endpoint_id}/logs", params={"follow": "true", **params}
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        for text in response.iter_lines():
            yield json.loads(text) if text.strip() else None


def test_follow_sends_lines_written_after_it_started(server: Server, ran: dict[str, Any]) -> None:
    eid = ran["endpoint"]["id"]
    stream = follow(server, eid, tail=1)
    first = next(stream)  # the stream is open: the follower is in place
    assert first is not None and first == logs(server, eid, tail=1)[0]
    job = server.http.post(f"/v2/{eid}/run", json={"input": {"followed": True}}).json()

    def the_jobs_line() -> dict[str, Any] | None:
        item = next(stream)
        return item if item is not None and job["id"] in item["line"] else None

    try:
        line = server.wait_for(the_jobs_line, what="the job's lines in the followed stream")
        assert line["time"] is not None
    finally:
        stream.close()


def test_follow_ends_when_the_endpoint_is_deleted(server: Server) -> None:
    endpoint = server.create_endpoint(workersMax=0)
    stream = follow(server, endpoint["id"])
    assert next(stream) is None  # no lines yet: an empty one says the stream is open
    assert server.http.delete(f"/v1/endpoints/{endpoint['id']}").status_code == 204
    started = time.monotonic()
    assert [x for x in stream if x is not None] == []
    assert time.monotonic() - started < 10


def test_another_users_key_gets_404(server: Server, ran: dict[str, Any], other_key: str) -> None:
    eid = ran["endpoint"]["id"]
    carol = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {other_key}"})
    with carol:
        assert carol.get(f"/v1/endpoints/{eid}/logs").status_code == 404
        assert carol.get(f"/v1/endpoints/{eid}/logs", params={"follow": "true"}).status_code == 404


def skiff_logs(server: Server, *args: str) -> list[str]:
    return [sys.executable, "-m", "skiff", "logs", *args, "--url", server.url, "--key", server.key]


def test_the_cli_prints_time_worker_and_line(server: Server, ran: dict[str, Any]) -> None:
    eid, worker = ran["endpoint"]["id"], ran["job"]["workerId"]
    out = subprocess.run(skiff_logs(server, eid), capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert any(BANNER in line for line in lines)
    stamp, who, _rest = lines[0].split(" ", 2)
    assert stamp.endswith("Z") and who == worker
    missing = subprocess.run(skiff_logs(server, "nope"), capture_output=True, text=True)
    assert missing.returncode != 0 and "404" in missing.stderr


def test_the_cli_follows_until_interrupted(server: Server, ran: dict[str, Any]) -> None:
    eid = ran["endpoint"]["id"]
    proc = subprocess.Popen(
        skiff_logs(server, eid, "-f", "--tail", "3"), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.split(" ", 2)[1] == ran["job"]["workerId"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
