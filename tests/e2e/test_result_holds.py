"""A worker's job-done answered when its next job reaches it, with the real runpod SDK: the SDK
starts that job as soon as the answer ends the previous job's task, instead of on its 100 ms
tick, and nothing about holding an answer keeps a worker or the server from stopping."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness import Server, running

#: Far longer than any wait below: a worker gone sooner left on SIGTERM, not on SIGKILL.
STOP_GRACE = "60"


def sdk_lines(server: Server, endpoint_id: str) -> list[dict[str, Any]]:
    """The worker's SDK log lines (JSON, as the SDK writes them with RUNPOD_ENDPOINT_ID)."""
    got = server.http.get(f"/v1/endpoints/{endpoint_id}/logs").json()["lines"]
    parsed = []
    for entry in got:
        try:
            line = json.loads(entry["line"])
        except ValueError:
            continue
        if isinstance(line, dict):
            parsed.append(line)
    return parsed


def where(lines: list[dict[str, Any]], job_id: str, message: str) -> int:
    for at, line in enumerate(lines):
        if line.get("requestId") == job_id and line.get("message") == message:
            return at
    raise AssertionError(f"no {message!r} line for {job_id}")


def ready_endpoint(server: Server) -> str:
    endpoint = server.create_endpoint(
        "concurrent_worker.py", workersMin=1, workersMax=1, idleTimeout=600
    )
    eid = str(endpoint["id"])
    server.wait_for(
        lambda: server.http.get(f"/v2/{eid}/health").json()["workers"]["idle"] == 1,
        what="an idle worker",
    )
    return eid


def runsync(server: Server, endpoint_id: str, **job_input: Any) -> dict[str, Any]:
    done = server.http.post(f"/v2/{endpoint_id}/runsync", json={"input": job_input}).json()
    assert done["status"] == "COMPLETED", done
    return dict(done)


def test_the_answer_to_a_job_done_arrives_with_the_workers_next_job(server: Server) -> None:
    eid = ready_endpoint(server)
    first = runsync(server, eid, n=1)
    # Kept: the worker polls again and waits, its first answer held; nothing outside the
    # server shows a held answer to wait on.
    time.sleep(0.5)
    second = runsync(server, eid, n=2)
    assert second["output"] == {"echo": {"n": 2}}

    def both_finished() -> list[dict[str, Any]] | None:
        lines = sdk_lines(server, eid)
        finished = {x.get("requestId") for x in lines if x.get("message") == "Finished."}
        return lines if {first["id"], second["id"]} <= finished else None

    lines = server.wait_for(both_finished, what="both jobs' Finished. lines")
    # The SDK queued the second job before the first job's answer reached it, and started it
    # right after that answer: the answer was what woke its job loop.
    queued_second = where(lines, second["id"], "Job Queued")
    finished_first = where(lines, first["id"], "Finished.")
    started_second = where(lines, second["id"], "Started.")
    assert queued_second < finished_first < started_second


def test_a_worker_holding_an_answer_still_stops_on_sigterm(tmp_path: Path) -> None:
    env = {"SKIFF_WORKER_STOP_GRACE_SECONDS": STOP_GRACE}
    with running(tmp_path / "data", env=env) as server:
        eid = ready_endpoint(server)
        runsync(server, eid, n=1)
        time.sleep(0.5)  # kept: the worker polls again, its answer held (nothing shows that)
        server.http.patch(f"/v1/endpoints/{eid}", json={"workersMin": 0, "workersMax": 0})
        started = time.monotonic()
        server.wait_for(
            lambda: (
                not server.http.get(
                    f"/v1/endpoints/{eid}", params={"includeWorkers": "true"}
                ).json()["workers"]
            ),
            timeout=40,
            what="the worker to stop",
        )
        assert time.monotonic() - started < float(STOP_GRACE)


def test_the_server_stops_promptly_while_it_holds_an_answer(tmp_path: Path) -> None:
    env = {"SKIFF_WORKER_STOP_GRACE_SECONDS": STOP_GRACE}
    server = Server(tmp_path / "data", env=env)
    server.start()
    try:
        eid = ready_endpoint(server)
        runsync(server, eid, n=1)
        time.sleep(0.5)  # kept: the worker polls again, its answer held (nothing shows that)
        started = time.monotonic()
        server.stop()
        # Its worker left on SIGTERM too: stop() waits up to 30 s, then kills.
        assert time.monotonic() - started < 25
    finally:
        server.stop()
