"""A worker forked from a zygote (providers/fork_server.py) end to end: a real server with the
sandbox off, the unmodified runpod-SDK echo worker and the runpod client. The first worker
starts afresh while the zygote imports the SDK; the next comes out of the zygote (its parent
is the zygote, not the server), takes and answers jobs with the SDK imported under its own
environment, and stops with its grace when scaled to zero."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import runpod
from harness import Server, running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # Only a worker outside the sandbox comes out of a zygote.
    with running(tmp_path_factory.mktemp("skiff") / "data", env={"SKIFF_SANDBOX": "off"}) as srv:
        yield srv


def _parent(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError(f"no PPid for {pid}")


def _worker(server: Server, endpoint_id: str) -> dict[str, Any] | None:
    answer = server.http.get(f"/v1/endpoints/{endpoint_id}", params={"includeWorkers": "true"})
    workers = [w for w in answer.json()["workers"] if w["state"] == "idle"]
    return workers[0] if workers else None


def _client(server: Server, endpoint_id: str) -> Any:
    runpod.api_key = server.key
    runpod.endpoint_url_base = f"{server.url}/v2"
    return runpod.Endpoint(endpoint_id)


def test_a_worker_forked_from_the_zygote_runs_jobs_and_stops_with_its_grace(
    server: Server,
) -> None:
    first = server.create_endpoint(workersMin=1, workersMax=1)
    worker = server.wait_for(lambda: _worker(server, first["id"]), what="the first worker")
    assert _parent(int(worker["pid"])) == server.proc.pid, "the first starts afresh"  # type: ignore[union-attr]
    server.wait_for(
        lambda: "fork server of" in server.log_path.read_text(), what="the zygote to be ready"
    )

    second = server.create_endpoint(workersMin=1, workersMax=1)
    forked = server.wait_for(lambda: _worker(server, second["id"]), what="the forked worker")
    pid = int(forked["pid"])
    zygote = _parent(pid)
    assert zygote != server.proc.pid  # type: ignore[union-attr]
    assert _parent(zygote) == server.proc.pid  # type: ignore[union-attr]
    client = _client(server, second["id"])
    for n in range(3):
        assert client.run_sync({"n": n}, timeout=60) == {"echo": {"n": n}}

    answer = server.http.patch(
        f"/v1/endpoints/{second['id']}", json={"workersMin": 0, "workersMax": 0}
    )
    assert answer.status_code == 200, answer.text
    server.wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="the forked worker to end")
    health = server.http.get(f"/v2/{second['id']}/health").json()
    assert health["workers"].get("unhealthy", 0) == 0, health
    assert "Traceback" not in server.log_path.read_text()
