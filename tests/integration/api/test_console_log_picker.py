"""The console's endpoint logs page offers, in its worker picker, the workers whose output this
server keeps: those it started (with a log file or not yet), never one started outside skiff
with a worker token, whose output stays where it runs. Through a real server and a signed-in
console session."""

from __future__ import annotations

import re
from pathlib import Path

from in_process import ADMIN_KEY
from integration.api.test_console_terminal import serving
from skiff.domain.workers import Worker, WorkerKind, WorkerState, outside_key


async def test_the_picker_lists_the_workers_started_here_and_no_outside_worker(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as served:
        services = served.services
        template = await served.admin.post(
            "/v1/templates",
            json={"name": "t", "imageName": "local/w", "dockerStartCmd": ["true"]},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        )
        made = await served.admin.post(
            "/v1/endpoints",
            json={"templateId": template.json()["id"], "computeType": "CPU", "workersMax": 0},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        )
        assert made.status_code == 200, made.text
        endpoint_id = made.json()["id"]
        for worker in (
            Worker("local-1", endpoint_id, WorkerKind.LOCAL, WorkerState.IDLE, 1, 0.0),
            Worker(
                outside_key(endpoint_id, "gpu-box-1"),
                endpoint_id,
                WorkerKind.EXTERNAL,
                WorkerState.IDLE,
                1,
                0.0,
            ),
        ):
            await services.workers.add(worker)
        ended = services.logs.files.sink(endpoint_id, "ended-1")
        ended.feed(b"a line of a worker gone since\n")
        ended.close()

        page = await served.admin.get(f"/console/endpoints/{endpoint_id}/logs")
        assert page.status_code == 200, page.text
        picker = re.search(r'<select id="f-worker".*?</select>', page.text, re.S)
        assert picker is not None, page.text
        offered = re.findall(r'<option value="([^"]*)"', picker.group(0))
        assert offered == ["", "ended-1", "local-1"]
