"""``GET /v1/pod/{worker_id}/logs`` (the hosted log service's shape, which runpod-flash reads)
on both stores: the owner reads its worker's lines, each starting with its time; another user,
an unknown id and ids no worker can have get a 404, never a 500 or someone else's lines."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from in_process import InProcess, running_on
from skiff.domain.workers import Worker, WorkerKind, WorkerState


async def _worker_with_a_line(app: InProcess, line: bytes) -> str:
    """A worker of an endpoint of the owner's (``app.http``), whose log holds ``line``."""
    template = await app.http.post(
        "/v1/templates", json={"name": "t", "imageName": "local/w", "dockerStartCmd": ["true"]}
    )
    endpoint = await app.http.post(
        "/v1/endpoints",
        json={"templateId": template.json()["id"], "computeType": "CPU", "workersMax": 0},
    )
    endpoint_id = endpoint.json()["id"]
    worker = Worker("wk1", endpoint_id, WorkerKind.LOCAL, WorkerState.IDLE, 1, 0.0)
    await app.services.workers.add(worker)
    sink = app.services.logs.files.sink(endpoint_id, worker.id)
    sink.feed(line + b"\n")
    sink.close()
    return worker.id


#: What another caller asks for, each answered 404 (``{w}``: the owner's worker).
ASKED = {
    "another user's worker": "/v1/pod/{w}/logs",
    "an unknown worker": "/v1/pod/nosuchworker/logs",
    "a NUL in the id": "/v1/pod/wk%001/logs",
    "a lone surrogate in the id": "/v1/pod/%ED%A0%80/logs",
    "a huge id": "/v1/pod/" + "w" * 5000 + "/logs",
}


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
async def test_only_the_owner_reads_a_workers_log(store: str, tmp_path: Path) -> None:
    async with running_on(store, tmp_path / "data") as app:
        worker_id = await _worker_with_a_line(app, b"SECRET-LINE of the owner's worker")
        own = await app.http.get(f"/v1/pod/{worker_id}/logs")
        assert own.status_code == 200, own.text
        (line,) = own.json()["container"]
        stamp, text = line.split(" ", 1)
        assert stamp[:4].isdigit() and stamp.endswith("Z")
        assert text == "SECRET-LINE of the owner's worker"
        assert own.json()["system"] == []
        assert (await app.http.get(f"/v1/pod/{worker_id}/logs?tail=0")).status_code == 400

        issued = await app.services.auth.issue_key("bob", False, "")
        async with httpx.AsyncClient(
            transport=app.transport,
            base_url=str(app.http.base_url),
            headers={"Authorization": f"Bearer {issued.key}"},
        ) as bob:
            for what, path in ASKED.items():
                answer = await bob.get(path.format(w=worker_id))
                assert answer.status_code == 404, (what, answer.status_code, answer.text)
                assert "SECRET-LINE" not in answer.text, what
