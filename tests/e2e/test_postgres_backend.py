"""The whole platform on PostgreSQL: the real server, real workers and the real SDK, with all
state in a fresh schema of the local PostgreSQL (skipped when none is reachable)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import Server, running

from pgtest import PG_DSN

DSN = PG_DSN


def _settings(schema: str) -> dict[str, str | None]:
    return {"SKIFF_DATABASE_URL": DSN, "SKIFF_DATABASE_SCHEMA": schema}


def test_jobs_run_and_survive_a_restart_on_postgresql(tmp_path: Path, schema: str) -> None:
    with running(tmp_path / "data", env=_settings(schema)) as server:
        eid = server.create_endpoint(workersMax=1, idleTimeout=30)["id"]
        done = server.http.post(f"/v2/{eid}/runsync", json={"input": {"pg": 1}}).json()
        assert done["status"] == "COMPLETED" and done["output"] == {"echo": {"pg": 1}}
        queued = server.http.post(f"/v2/{eid}/run", json={"input": {"after": 1}}).json()
        port = server.port
    restarted = Server(tmp_path / "data2", port=port, env=_settings(schema))
    restarted.start()
    try:
        assert restarted.http.get(f"/v1/endpoints/{eid}").status_code == 200

        def finished() -> Any:
            body = restarted.http.get(f"/v2/{eid}/status/{queued['id']}").json()
            return body if body["status"] == "COMPLETED" else None

        assert restarted.wait_for(finished, what="the queued job")["output"] == {
            "echo": {"after": 1}
        }
    finally:
        restarted.stop()


def test_batch_workers_scale_down_once_the_queue_drains_on_postgresql(
    tmp_path: Path, schema: str
) -> None:
    # Real SDK workers taking 8 jobs at a time finish several at once: each finish used to see
    # the others still running, so a worker stayed running with no job and never stopped.
    with running(tmp_path / "data", env=_settings(schema)) as server:
        template = server.create_template("concurrent_worker.py", env={"E2E_CONCURRENCY": "8"})
        created = server.http.post(
            "/v1/endpoints",
            json={
                "templateId": template["id"],
                "computeType": "CPU",
                "workersMax": 2,
                "idleTimeout": 1,
            },
        )
        assert created.status_code == 200, created.text
        eid = created.json()["id"]
        ids = [
            server.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 0.02, "i": i}}).json()["id"]
            for i in range(160)
        ]

        def drained() -> bool:
            counts = server.http.get(f"/v2/{eid}/health").json()["jobs"]
            return bool(counts["completed"] == len(ids))

        def workers() -> list[dict[str, Any]]:
            body = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"})
            return list(body.json()["workers"])

        try:
            server.wait_for(drained, timeout=120, what="all 160 jobs to complete")
        except AssertionError as exc:
            # What the server and its workers were doing, so a failure here can be read.
            raise AssertionError(
                f"{exc}\nhealth: {server.http.get(f'/v2/{eid}/health').text}"
                f"\nworkers: {workers()}\n{_worker_log_tails(server.data_dir)}"
            ) from None

        server.wait_for(lambda: workers() == [], timeout=30, what="the workers to scale down")


def _worker_log_tails(data_dir: Path, lines: int = 15) -> str:
    tails = []
    for log in sorted(data_dir.glob("logs/*/*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        tails.append(f"== {log.name}\n" + "\n".join(tail))
    return "\n".join(tails) or "no worker logs"
