"""``GET /metrics`` on a real server, after a real worker ran a job."""

from __future__ import annotations

import httpx
from harness import Server
from prometheus_client.parser import text_string_to_metric_families


def test_metrics_answer_prometheus_text_with_jobs_and_workers_of_an_endpoint(
    server: Server,
) -> None:
    endpoint = server.create_endpoint("echo_worker.py")
    ran = server.http.post(f"/v2/{endpoint['id']}/runsync", json={"input": {}})
    assert ran.status_code == 200, ran.text
    assert ran.json()["status"] == "COMPLETED"

    # No API key: a scraper is not a client of the job interface.
    response = httpx.get(f"{server.url}/metrics", timeout=10)

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    ours = {name for name, labels in samples if ("endpoint", endpoint["id"]) in labels}
    assert {"skiff_jobs", "skiff_workers", "skiff_queue_depth"} <= ours
    assert samples[("skiff_jobs", (("endpoint", endpoint["id"]), ("state", "COMPLETED")))] == 1
    assert (
        samples[
            (
                "skiff_jobs_finished_total",
                (("endpoint", endpoint["id"]), ("status", "COMPLETED")),
            )
        ]
        == 1
    )
