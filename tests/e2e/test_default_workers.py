"""Line-ups end to end (services/lineup.py): unmodified runpod-SDK workers at the SDK's default
concurrency of one (``echo_worker.py``: plain ``runpod.serverless.start({"handler": ...})``)
take a list on their single take and run it back to back; every job still runs exactly once,
``/status`` times a job from its real start, and a job cancelled or purged in line never starts
(its worker is ended before its turn) while the jobs behind it run without waiting for it."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, running
from prometheus_client.parser import text_string_to_metric_families

#: What each job of the first test sleeps in its handler.
HANDLER_SECONDS = 0.05
#: How deep (in ms of handler time: a dozen jobs) the first test's line-ups are at least on
#: average, so that time spent in line would show in ``executionTime``.
LINEUP_DEPTH_MS = 600


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env: dict[str, str | None] = {
        "SKIFF_LINEUP_SECONDS": "20",
        # The tests read hundreds of statuses; limits are not their subject.
        "SKIFF_RATE_LIMITS": "off",
        # Their workers count their runs in a file on the host, which a sandboxed worker may
        # not write (test_hostile_tenant.py is the sandbox's own test).
        "SKIFF_SANDBOX": "off",
    }
    with running(tmp_path_factory.mktemp("skiff") / "data", env=env) as srv:
        yield srv


def _endpoint(server: Server, record: Path, **fields: Any) -> str:
    """An echo_worker.py endpoint whose handler appends every job id it runs to ``record``."""
    template = server.create_template("echo_worker.py", env={"E2E_RECORD": str(record)})
    created = server.http.post(
        "/v1/endpoints", json={"templateId": template["id"], "computeType": "CPU", **fields}
    )
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _status(server: Server, endpoint_id: str, job_id: str) -> dict[str, Any]:
    response = server.http.get(f"/v2/{endpoint_id}/status/{job_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def _counter(server: Server, family: str, endpoint_id: str, **labels: str) -> float:
    """A counter's value for the endpoint on ``/metrics`` (0 before its first count)."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    wanted = {"endpoint": endpoint_id, **labels}
    return sum(
        sample.value
        for fam in text_string_to_metric_families(text)
        if fam.name == family
        for sample in fam.samples
        if sample.name == f"{family}_total" and sample.labels == wanted
    )


def _runs(record: Path) -> collections.Counter[str]:
    lines = record.read_text().split() if record.exists() else []
    return collections.Counter(lines)


def _completed(server: Server, endpoint_id: str) -> int:
    return int(server.http.get(f"/v2/{endpoint_id}/health").json()["jobs"]["completed"])


def test_two_default_workers_run_200_lined_up_jobs_each_exactly_once_timed_from_their_start(
    server: Server, tmp_path: Path
) -> None:
    record = tmp_path / "runs.txt"
    eid = _endpoint(server, record, workersMin=2, workersMax=2, idleTimeout=30)
    started = time.monotonic()
    ids = [
        server.http.post(
            f"/v2/{eid}/run", json={"input": {"sleep": HANDLER_SECONDS, "i": i}}
        ).json()["id"]
        for i in range(200)
    ]
    # One job a second per worker without line-ups: 100 s; with them, a few seconds.
    server.wait_for(lambda: _completed(server, eid) == len(ids), timeout=45, what="200 jobs")
    elapsed_ms = (time.monotonic() - started) * 1000

    runs = _runs(record)
    assert set(runs) == set(ids)
    assert max(runs.values()) == 1
    lined_up = _counter(server, "skiff_jobs_lined_up", eid)
    takes = _counter(server, "skiff_job_take_polls", eid, outcome="job")
    assert lined_up > 0
    assert lined_up / takes * HANDLER_SECONDS * 1000 > LINEUP_DEPTH_MS, (lined_up, takes)
    executed_ms = 0
    for i, job_id in enumerate(ids):
        body = _status(server, eid, job_id)
        assert body["status"] == "COMPLETED", body
        assert body["output"] == {"echo": {"sleep": HANDLER_SECONDS, "i": i}}
        assert body["delayTime"] >= 0, body
        assert body["executionTime"] >= HANDLER_SECONDS * 1000, body
        executed_ms += body["executionTime"]
    # Two workers run one job each at a time, so their jobs' times add up to at most twice the
    # whole run's, however a machine's hiccup stretches one of them. Timed from their take,
    # lined-up jobs would add their time in line: with line-ups a dozen jobs deep and more,
    # several times the whole run.
    assert executed_ms <= 2 * elapsed_ms, (executed_ms, elapsed_ms)


def test_a_cancelled_lined_up_job_stays_cancelled_and_the_rest_of_its_line_completes(
    server: Server, tmp_path: Path
) -> None:
    record = tmp_path / "runs.txt"
    eid = _endpoint(server, record, workersMax=1, idleTimeout=30)
    for i in range(3):  # history: nothing is lined up before the endpoint has some
        done = server.http.post(f"/v2/{eid}/runsync", json={"input": {"warm": i}}).json()
        assert done["status"] == "COMPLETED", done
    handed_before = _counter(server, "skiff_jobs_lined_up", eid) + _counter(
        server, "skiff_job_take_polls", eid, outcome="job"
    )
    ids = [
        server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 0.3, "i": i}}).json()["id"]
        for i in range(12)
    ]
    target = 8

    def target_lined_up() -> bool:
        # Jobs are handed out oldest first, so the target is on the worker once this many were
        # handed to it; still IN_QUEUE, it waits in its line.
        handed = (
            _counter(server, "skiff_jobs_lined_up", eid)
            + _counter(server, "skiff_job_take_polls", eid, outcome="job")
            - handed_before
        )
        status = _status(server, eid, ids[target])["status"]
        assert status == "IN_QUEUE", f"job {target} left the queue before it was lined up"
        return handed >= target + 1

    server.wait_for(target_lined_up, timeout=20, what="the job to be lined up")
    cancelled = server.http.post(f"/v2/{eid}/cancel/{ids[target]}")
    assert cancelled.json() == {"id": ids[target], "status": "CANCELLED"}
    at_once = _status(server, eid, ids[target])
    assert at_once["status"] == "CANCELLED" and "workerId" not in at_once

    others = [j for j in ids if j != ids[target]]
    server.wait_for(
        lambda: _completed(server, eid) == 3 + len(others), timeout=30, what="the other jobs"
    )
    later = _status(server, eid, ids[target])
    assert later["status"] == "CANCELLED" and "output" not in later, later
    for i, job_id in enumerate(ids):
        if i != target:
            assert _status(server, eid, job_id)["output"] == {"echo": {"sleep": 0.3, "i": i}}
    runs = _runs(record)
    # The worker held the cancelled job in its queue; it was ended before the job's turn.
    assert all(runs[j] == 1 for j in others)
    assert runs[ids[target]] == 0
    health = server.http.get(f"/v2/{eid}/health").json()["jobs"]
    assert health["cancelled"] == 1 and health["inQueue"] == 0 and health["inProgress"] == 0


def _line_up_behind_a_running_job(
    server: Server, eid: str, behind: list[dict[str, Any]]
) -> tuple[str, list[str]]:
    """A job running on the endpoint's one worker (3 s), with jobs of these inputs lined up
    behind it, still ``IN_QUEUE``: their ids."""
    for i in range(3):  # history: nothing is lined up before the endpoint has some
        done = server.http.post(f"/v2/{eid}/runsync", json={"input": {"warm": i}}).json()
        assert done["status"] == "COMPLETED", done
    # Busy while the rest is queued, so that the worker's next take gets them all.
    busy = server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 1}}).json()["id"]
    server.wait_for(lambda: _status(server, eid, busy)["status"] == "IN_PROGRESS", what="busy")
    lined_before = _counter(server, "skiff_jobs_lined_up", eid)
    running = server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 3}}).json()["id"]
    ids = [server.http.post(f"/v2/{eid}/run", json={"input": i}).json()["id"] for i in behind]

    def lined_up() -> bool:
        handed = _counter(server, "skiff_jobs_lined_up", eid) - lined_before
        return handed >= len(ids) and _status(server, eid, running)["status"] == "IN_PROGRESS"

    server.wait_for(lined_up, timeout=20, what="the jobs to be lined up behind a running one")
    for job_id in ids:
        assert _status(server, eid, job_id)["status"] == "IN_QUEUE", "left its line too soon"
    return running, ids


def test_a_job_cancelled_in_line_never_starts_and_the_job_behind_it_does_not_wait_for_it(
    server: Server, tmp_path: Path
) -> None:
    record = tmp_path / "runs.txt"
    eid = _endpoint(server, record, workersMax=1, idleTimeout=30)
    # Were the cancelled job to start, the job behind it would wait ten minutes for it.
    running, (cancelled, behind) = _line_up_behind_a_running_job(
        server, eid, [{"sleep": 600}, {"after": "cancelled"}]
    )
    answer = server.http.post(f"/v2/{eid}/cancel/{cancelled}")
    assert answer.json() == {"id": cancelled, "status": "CANCELLED"}

    server.wait_for(
        lambda: _status(server, eid, behind)["status"] == "COMPLETED",
        timeout=60,
        what="the job behind the cancelled one",
    )
    assert _status(server, eid, behind)["output"] == {"echo": {"after": "cancelled"}}
    assert _status(server, eid, running)["status"] == "COMPLETED"
    assert _status(server, eid, cancelled)["status"] == "CANCELLED"
    started = record.read_text().split()
    assert cancelled not in started, "the cancelled job's handler started"
    assert started.index(running) < started.index(behind)
    assert _runs(record)[behind] == 1


def test_jobs_purged_from_a_line_never_start_and_the_next_job_does_not_wait_for_them(
    server: Server, tmp_path: Path
) -> None:
    record = tmp_path / "runs.txt"
    eid = _endpoint(server, record, workersMax=1, idleTimeout=30)
    running, purged = _line_up_behind_a_running_job(server, eid, [{"sleep": 600}, {"sleep": 600}])
    assert server.http.post(f"/v2/{eid}/purge-queue").json()["removed"] == 2
    after = server.http.post(f"/v2/{eid}/run", json={"input": {"after": "purge"}}).json()["id"]

    server.wait_for(
        lambda: _status(server, eid, after)["status"] == "COMPLETED",
        timeout=60,
        what="the job submitted after the purge",
    )
    assert _status(server, eid, running)["status"] == "COMPLETED"
    started = record.read_text().split()
    assert not set(purged) & set(started), "a purged job's handler started"
    assert started.index(running) < started.index(after)
