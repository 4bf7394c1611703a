"""Several ``skiff serve`` replicas on one PostgreSQL: jobs, wake-ups, workers and the singleton
loops cross between them, and the death of the leader loses nothing that was accepted.

Each replica is a real server process on its own port and data folder, all on one fresh schema
of the local PostgreSQL (skipped, with how to enable it, when none is reachable). The client
alternates between replicas the way a round-robin load balancer would.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import WORKERS, Server

from pgtest import PG_DSN
from pod_programs import pod_port
from skiff.providers import bubblewrap

DSN = PG_DSN


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """Every handler run appends its job id here (see echo_worker.py)."""
    return tmp_path / "runs.txt"


def _replica(tmp_path: Path, name: str, schema: str, record: Path, **extra: str | None) -> Server:
    env: dict[str, str | None] = {
        "SKIFF_DATABASE_URL": DSN,
        "SKIFF_DATABASE_SCHEMA": schema,
        "SKIFF_LEADER_CHECK_SECONDS": "0.2",
        # The tests poll every job's status many times a second; limits are not their subject.
        "SKIFF_RATE_LIMITS": "off",
        "E2E_RECORD": str(record),
        # Their workers count their runs in a file on the host, which a sandboxed worker may
        # not write (test_hostile_tenant.py is the sandbox's own test).
        "SKIFF_SANDBOX": "off",
        **extra,
    }
    server = Server(tmp_path / name, env=env)
    server.start()
    return server


@pytest.fixture
def replicas(tmp_path: Path, schema: str, record: Path) -> Iterator[list[Server]]:
    """Two replicas; the first started leads (it is alone when it campaigns)."""
    first = _replica(tmp_path, "a", schema, record)
    second = _replica(tmp_path, "b", schema, record)
    try:
        yield [first, second]
    finally:
        for server in (second, first):
            server.stop()


def _health(server: Server) -> dict[str, Any]:
    return dict(httpx.get(f"{server.url}/healthz", timeout=5).json())


def _status(server: Server, endpoint_id: str, job_id: str) -> dict[str, Any]:
    response = server.http.get(f"/v2/{endpoint_id}/status/{job_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def _all_final(servers: list[Server], endpoint_id: str, job_ids: list[str]) -> Any:
    """Statuses read round-robin; truthy once every job is final."""
    readers = itertools.cycle(servers)
    statuses = {j: _status(next(readers), endpoint_id, j)["status"] for j in job_ids}
    if all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT") for s in statuses.values()):
        return statuses
    return None


def _external_worker(server: Server, endpoint_id: str, name: str) -> subprocess.Popen[bytes]:
    """A worker started by hand, as on another host: `skiff worker-token` gives its
    environment, pointed at one replica."""
    printed = subprocess.run(
        [sys.executable, "-m", "skiff", "worker-token", endpoint_id, "--url", server.url],
        env=server.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKIFF_", "RUNPOD_"))}
    for line in printed.splitlines():
        name_value = line.removeprefix("export ")
        key, _, value = name_value.partition("=")
        env[key] = value.strip("'")
    env.update(
        RUNPOD_POD_ID=name,
        RUNPOD_PING_INTERVAL="1000",
        E2E_RECORD=server.extra_env["E2E_RECORD"] or "",
        PYTHONUNBUFFERED="1",
    )
    log = open(server.data_dir.parent / f"{name}.log", "ab")  # noqa: SIM115
    # A session of its own: the SDK forks its heartbeat into it, and `_stop` ends them both.
    return subprocess.Popen(
        [sys.executable, str(WORKERS / "echo_worker.py")],
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The worker and its heartbeat: a worker ended by SIGTERM's default action leaves its
    forked heartbeat running, pinging a server long gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def test_exactly_one_replica_leads(replicas: list[Server]) -> None:
    first, second = replicas
    assert _health(first)["leader"] is True
    assert _health(second)["leader"] is False
    assert _health(first)["replica"] != _health(second)["replica"]


def test_jobs_through_both_replicas_complete_exactly_once(
    replicas: list[Server], record: Path
) -> None:
    first, second = replicas
    endpoint = first.create_endpoint(workersMax=2, idleTimeout=60, scalerValue=1)
    eid = endpoint["id"]
    external = _external_worker(second, eid, "external-1")
    try:
        entry = itertools.cycle(replicas)
        ids = [
            next(entry).http.post(f"/v2/{eid}/run", json={"input": {"n": n}}).json()["id"]
            for n in range(40)
        ]
        statuses = first.wait_for(
            lambda: _all_final(replicas, eid, ids), timeout=120, what="every job to finish"
        )
        assert set(statuses.values()) == {"COMPLETED"}
        outputs = [_status(second, eid, j)["output"] for j in ids]
        assert outputs == [{"echo": {"n": n}} for n in range(40)]
        runs = Counter(record.read_text().split())
        assert all(runs[j] == 1 for j in ids), runs
        assert sum(runs.values()) == len(ids)
        # The leader ran the local workers; their logs read the same through the follower.
        local = {
            w["id"]
            for w in first.http.get(f"/v1/endpoints/{eid}?includeWorkers=true").json()["workers"]
            if w["kind"] == "local"
        }
        assert local
        for server in replicas:
            lines = server.http.get(f"/v1/endpoints/{eid}/logs").json()["lines"]
            assert {line["worker"] for line in lines} & local
        # The hand-started worker, attached to the second replica, is counted by both.
        for server in replicas:
            workers = server.http.get(f"/v1/endpoints/{eid}?includeWorkers=true").json()["workers"]
            assert "external-1" in {w["id"] for w in workers}
            assert server.http.get(f"/v2/{eid}/health").json()["workers"]["idle"] >= 1
    finally:
        _stop(external)


def test_runsync_and_cancel_cross_replicas_without_the_safety_poll(
    tmp_path: Path, schema: str, record: Path
) -> None:
    """With the safety-net poll at a minute and takes held for as long, only NOTIFY can end
    these waits within the 15 s a /runsync waits here: a job submitted on one replica wakes a
    take held by the other, and its result wakes the /runsync waiting on the first."""
    slow = {"SKIFF_WAIT_POLL_SECONDS": "60", "SKIFF_TAKE_WAIT_SECONDS": "60"}
    first = _replica(tmp_path, "a", schema, record, **slow)
    second = _replica(tmp_path, "b", schema, record, **slow)
    try:
        eid = first.create_endpoint(workersMax=1, workersMin=1, idleTimeout=60)["id"]
        # Its only worker is the leader's, and calls the leader.
        first.wait_for(
            lambda: second.http.get(f"/v2/{eid}/health").json()["workers"]["idle"] == 1,
            what="the worker to be idle",
        )
        done = second.http.post(
            f"/v2/{eid}/runsync?wait=15000", json={"input": {"x": 1}}, timeout=30
        )
        assert done.json()["status"] == "COMPLETED", done.text
        assert done.json()["output"] == {"echo": {"x": 1}}
        # A cancel on one replica reaches the worker's job-stop poll held by the other.
        job = second.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 30}}).json()
        first.wait_for(
            lambda: _status(second, eid, job["id"])["status"] == "IN_PROGRESS",
            what="the job to start",
        )
        cancelled = second.http.post(f"/v2/{eid}/cancel/{job['id']}").json()
        assert cancelled["status"] == "CANCELLED"
        # The worker let go of it (else it would still be busy) and takes the next job.
        after = first.http.post(
            f"/v2/{eid}/runsync?wait=45000", json={"input": {"y": 2}}, timeout=60
        )
        assert after.json()["status"] == "COMPLETED", after.text
    finally:
        second.stop()
        first.stop()


def test_killing_the_leader_under_load_loses_no_accepted_job(
    replicas: list[Server], record: Path
) -> None:
    first, second = replicas
    eid = first.create_endpoint(workersMax=2, idleTimeout=60, scalerValue=1)["id"]
    entry = itertools.cycle(replicas)
    ids = [
        next(entry).http.post(f"/v2/{eid}/run", json={"input": {"n": n, "sleep": 0.2}}).json()["id"]
        for n in range(30)
    ]
    # Let the leader's workers get going, then kill it outright, mid-job.
    first.wait_for(
        lambda: record.exists() and len(record.read_text().split()) >= 3,
        what="the first jobs to run",
    )
    assert first.proc is not None
    first.proc.kill()
    first.proc.wait()
    first.proc = None
    # The survivor takes the lead within seconds and scales on its own hosts.
    second.wait_for(lambda: _health(second)["leader"], timeout=15, what="the takeover")
    ids += [
        second.http.post(f"/v2/{eid}/run", json={"input": {"n": n}}).json()["id"]
        for n in range(30, 40)
    ]
    # Timeouts are enforced by the new leader's reaper.
    timed = second.http.post(
        f"/v2/{eid}/run", json={"input": {"sleep": 20}, "policy": {"executionTimeout": 5000}}
    ).json()["id"]
    statuses = second.wait_for(
        lambda: _all_final([second], eid, [*ids, timed]), timeout=120, what="every job"
    )
    assert statuses.pop(timed) == "TIMED_OUT"
    assert set(statuses.values()) == {"COMPLETED"}, statuses
    for n, job_id in enumerate(ids):
        assert _status(second, eid, job_id)["output"]["echo"]["n"] == n
    # Every accepted job ran; one cut off by the kill ran again (at least once, never lost).
    runs = Counter(record.read_text().split())
    assert all(runs[j] >= 1 for j in ids)


@pytest.mark.skipif(
    bubblewrap.executable() is None, reason="bubblewrap (bwrap) mounts a process pod's volume"
)
def test_the_leader_alone_runs_a_pod_and_the_next_leader_takes_it_over(
    tmp_path: Path, schema: str, record: Path
) -> None:
    # Pods' volumes live with the network volumes, on one file system every replica shares.
    shared = {"SKIFF_VOLUMES_DIR": str(tmp_path / "shared-volumes")}
    first = _replica(tmp_path, "a", schema, record, **shared)
    second = _replica(tmp_path, "b", schema, record, **shared)
    try:
        port = pod_port()
        # Asked of the replica that does not lead: the leader places and runs it.
        made = second.http.post(
            "/v1/pods",
            json={
                "name": "replicated",
                "imageName": "local/python",
                "computeType": "CPU",
                "dockerStartCmd": [sys.executable, str(WORKERS / "pod_server.py"), str(port)],
                "ports": [f"{port}/http"],
                "volumeInGb": 1,
            },
        )
        assert made.status_code == 201, made.text
        pod_id = made.json()["id"]
        url = f"http://127.0.0.1:{port}"
        assert _served(first, url)["starts"] == 1
        # The pod may answer before the leader has written down that it runs.
        second.wait_for(lambda: _pod(second, pod_id)["status"] == "running", what="running")
        assert (first.data_dir / "pod-logs" / pod_id).is_dir()
        assert not (second.data_dir / "pod-logs" / pod_id).exists()

        assert first.proc is not None
        first.proc.kill()
        first.proc.wait()
        first.proc = None
        # Its process died with it; the new leader starts the pod again, volume and all.
        second.wait_for(lambda: _health(second)["leader"], timeout=15, what="the takeover")
        assert second.wait_for(lambda: _served(second, url)["starts"] == 2, what="the restart")
        second.wait_for(lambda: _pod(second, pod_id)["status"] == "running", what="running")
        assert (second.data_dir / "pod-logs" / pod_id).is_dir()
        second.http.delete(f"/v1/pods/{pod_id}")
    finally:
        for server in (second, first):
            server.stop()


def _pod(server: Server, pod_id: str) -> dict[str, Any]:
    return dict(server.http.get(f"/v1/pods/{pod_id}").json())


def _served(server: Server, url: str) -> dict[str, Any]:
    def answer() -> dict[str, Any] | None:
        try:
            return dict(httpx.get(url, timeout=2).json())
        except httpx.TransportError:
            return None

    return dict(server.wait_for(answer, what=f"{url} to answer"))
