"""Nothing that matters lives only in memory: a restart loses no job, endpoint or key."""

from __future__ import annotations

from pathlib import Path

from harness import Server


def test_jobs_survive_a_restart_and_finish(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server.start()
    try:
        endpoint = server.create_endpoint(workersMax=1, idleTimeout=30)
        eid = endpoint["id"]
        ids = [
            server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 1, "i": i}}).json()["id"]
            for i in range(4)
        ]
        # Stop while some are queued and (likely) one is running.
        server.wait_for(
            lambda: (
                server.http.get(f"/v2/{eid}/health").json()["workers"]["initializing"]
                + server.http.get(f"/v2/{eid}/health").json()["workers"]["idle"]
                + server.http.get(f"/v2/{eid}/health").json()["workers"]["running"]
                >= 1
            ),
            what="a worker to start",
        )
    finally:
        server.stop()

    restarted = Server(tmp_path / "data", port=server.port)
    restarted.start()
    try:
        assert restarted.http.get(f"/v1/endpoints/{eid}").status_code == 200
        for job_id in ids:
            restarted.wait_for(
                lambda job_id=job_id: (
                    restarted.http.get(f"/v2/{eid}/status/{job_id}").json()["status"] == "COMPLETED"
                ),
                timeout=90,
                what=f"job {job_id} to complete after the restart",
            )
        outputs = [
            restarted.http.get(f"/v2/{eid}/status/{j}").json()["output"]["echo"]["i"] for j in ids
        ]
        assert outputs == [0, 1, 2, 3]
    finally:
        restarted.stop()


def test_no_worker_outlives_the_server(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server.start()
    try:
        endpoint = server.create_endpoint(workersMin=1, workersMax=1, idleTimeout=30)
        workers = server.wait_for(
            lambda: [
                w
                for w in server.http.get(
                    f"/v1/endpoints/{endpoint['id']}", params={"includeWorkers": "true"}
                ).json()["workers"]
                if w.get("pid")
            ],
            what="a worker process",
        )
    finally:
        server.stop()
    pid = workers[0]["pid"]
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
