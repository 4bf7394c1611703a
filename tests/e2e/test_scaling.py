"""The first scaler, end to end: start on demand, keep the minimum, stop idle workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import Server, running


def _workers(server: Server, endpoint_id: str) -> list[dict[str, Any]]:
    body = server.http.get(f"/v1/endpoints/{endpoint_id}", params={"includeWorkers": "true"})
    return list(body.json()["workers"])


def test_scales_from_zero_and_back_to_zero_after_the_idle_timeout(server: Server) -> None:
    endpoint = server.create_endpoint(workersMax=1, idleTimeout=1)
    eid = endpoint["id"]
    assert _workers(server, eid) == []
    done = server.http.post(f"/v2/{eid}/runsync", json={"input": {"x": 1}}).json()
    assert done["status"] == "COMPLETED"
    server.wait_for(lambda: _workers(server, eid) == [], timeout=30, what="scale to zero")


def test_keeps_workers_min_running_without_jobs(server: Server) -> None:
    endpoint = server.create_endpoint(workersMin=2, workersMax=2, idleTimeout=1)
    eid = endpoint["id"]
    server.wait_for(
        lambda: sum(w["state"] == "idle" for w in _workers(server, eid)) == 2,
        what="two idle workers",
    )
    health = server.http.get(f"/v2/{eid}/health").json()
    assert health["workers"]["idle"] == 2
    server.http.patch(f"/v1/endpoints/{eid}", json={"workersMin": 0})
    server.wait_for(lambda: _workers(server, eid) == [], timeout=30, what="scale to zero")


def test_a_burst_never_gets_more_than_workers_max(server: Server) -> None:
    endpoint = server.create_endpoint(workersMax=2, idleTimeout=2)
    eid = endpoint["id"]
    ids = [
        server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 0.5, "i": i}}).json()["id"]
        for i in range(8)
    ]
    most = 0

    def all_done() -> bool:
        nonlocal most
        most = max(most, len(_workers(server, eid)))
        statuses = [server.http.get(f"/v2/{eid}/status/{j}").json()["status"] for j in ids]
        return all(s == "COMPLETED" for s in statuses)

    server.wait_for(all_done, timeout=90, what="the burst to finish")
    assert 1 <= most <= 2


def test_a_template_change_rolls_the_workers(server: Server) -> None:
    endpoint = server.create_endpoint(workersMin=1, workersMax=1, idleTimeout=30)
    eid = endpoint["id"]
    first = server.wait_for(
        lambda: [w for w in _workers(server, eid) if w["state"] == "idle"], what="a worker"
    )
    server.http.patch(f"/v1/templates/{endpoint['templateId']}", json={"env": {"ROLL": "1"}})
    server.wait_for(
        lambda: [
            w for w in _workers(server, eid) if w["version"] == 2 and w["id"] != first[0]["id"]
        ],
        what="a worker of the new version",
    )
    server.wait_for(
        lambda: all(w["version"] == 2 for w in _workers(server, eid)),
        what="the old worker to leave",
    )


def test_refresh_worker_recycles_the_worker_after_its_job(server: Server) -> None:
    endpoint = server.create_endpoint("refresh_worker.py", workersMax=1, idleTimeout=30)
    eid = endpoint["id"]
    first = server.http.post(f"/v2/{eid}/runsync", json={"input": {}}).json()
    second = server.http.post(f"/v2/{eid}/runsync", json={"input": {}}).json()
    assert first["status"] == second["status"] == "COMPLETED"
    assert first["output"]["instance"] != second["output"]["instance"]
    assert first["workerId"] != second["workerId"]


def test_an_ended_workers_home_goes_with_it_and_its_log_stays(server: Server) -> None:
    """A home is a worker's container disk: kept, those of workers started over and over
    would fill the server's disk."""
    endpoint = server.create_endpoint("home_worker.py", workersMax=1, idleTimeout=30)
    eid = endpoint["id"]
    done = server.http.post(f"/v2/{eid}/runsync", json={"input": {}}).json()
    assert done["status"] == "COMPLETED"
    home = Path(done["output"]["home"])
    server.wait_for(lambda: not home.exists(), timeout=30, what="the ended worker's home to go")
    assert home.parent.parent.is_dir()  # the endpoint's homes, shared by its next workers
    logs = server.http.get(f"/v1/endpoints/{eid}/logs", params={"worker": done["workerId"]})
    assert logs.status_code == 200 and logs.json()["lines"]


def test_ended_workers_logs_past_the_budget_go_oldest_first(tmp_path: Path) -> None:
    """Workers that start and end over and over leave logs within their user's budget, across
    all of the user's endpoints: here one byte, so only the newest ended worker's log stays."""
    with running(tmp_path / "data", env={"SKIFF_LOG_ENDED_MAX_BYTES": "1"}) as server:
        endpoint = server.create_endpoint("refresh_worker.py", workersMax=1, idleTimeout=30)
        eid = endpoint["id"]
        first = server.http.post(f"/v2/{eid}/runsync", json={"input": {}}).json()
        second = server.http.post(f"/v2/{eid}/runsync", json={"input": {}}).json()
        assert first["workerId"] != second["workerId"]
        folder = tmp_path / "data" / "logs" / eid
        server.wait_for(
            lambda: not (folder / f"{first['workerId']}.log").exists(),
            timeout=30,
            what="the older ended worker's log to go",
        )
        assert (folder / f"{second['workerId']}.log").exists()

        # Another endpoint of the same user shares the budget: a tenant does not get more
        # room on the disk by making endpoints.
        other = server.create_endpoint("refresh_worker.py", workersMax=1, idleTimeout=30)
        third = server.http.post(f"/v2/{other['id']}/runsync", json={"input": {}}).json()
        server.wait_for(
            lambda: not (folder / f"{second['workerId']}.log").exists(),
            timeout=30,
            what="the other endpoint's older ended worker's log to go",
        )
        assert (tmp_path / "data" / "logs" / other["id"] / f"{third['workerId']}.log").exists()


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def test_stopping_a_worker_ends_its_whole_process_group(server: Server) -> None:
    endpoint = server.create_endpoint(workersMin=1, workersMax=1, idleTimeout=1)
    eid = endpoint["id"]
    (worker,) = server.wait_for(
        lambda: [w for w in _workers(server, eid) if w["state"] == "idle"], what="a worker"
    )
    # The runpod SDK forks a heartbeat process into the worker's group.
    server.wait_for(lambda: len(_group_members(worker["pid"])) >= 2, what="the heartbeat")
    server.http.patch(f"/v1/endpoints/{eid}", json={"workersMin": 0})
    server.wait_for(lambda: _workers(server, eid) == [], timeout=30, what="scale to zero")
    server.wait_for(
        lambda: _group_members(worker["pid"]) == [], timeout=15, what="the group to be gone"
    )


def test_flashboot_serves_from_a_standby_worker_and_keeps_one_ready(server: Server) -> None:
    """With flashboot, a worker is started ahead of demand and held back; the first job is
    served by it (no process start on the job's path), and a worker that goes idle becomes the
    standby again instead of stopping."""
    eid = server.create_endpoint(workersMax=2, idleTimeout=1, flashboot=True)["id"]
    # Ready: started and heard from, so the job's path holds no process start.
    standby = server.wait_for(
        lambda: [
            w
            for w in _workers(server, eid)
            if w["state"] == "standby" and w.get("lastSeen") is not None
        ],
        what="a standby worker that has called in",
    )
    assert server.http.get(f"/v2/{eid}/health").json()["workers"]["standby"] == 1
    done = server.http.post(f"/v2/{eid}/runsync", json={"input": {"x": 1}}).json()
    assert done["status"] == "COMPLETED"
    assert done["workerId"] == standby[0]["id"]
    # Room under workersMax: a new standby starts behind the promoted one; once the promoted
    # one is idle past its timeout, it is the standby again and the extra one goes.
    server.wait_for(
        lambda: [w["state"] for w in _workers(server, eid)] == ["standby"],
        timeout=30,
        what="one standby again",
    )
    server.http.patch(f"/v1/endpoints/{eid}", json={"flashboot": False})
    server.wait_for(lambda: _workers(server, eid) == [], timeout=30, what="no standby")
    server.http.delete(f"/v1/endpoints/{eid}")
