"""A worker that opens more long-polls at once than the SDK ever does is refused past its
bound (429), so that one tenant's workers cannot hold every connection the server has; the
polls it held go on, and once they end it may poll again. In process, with the real routes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eventually import eventually_async
from in_process import ADMIN_KEY, running
from skiff.services.long_polls import MAX_POLLS_PER_WORKER


async def test_a_worker_past_its_long_polls_is_refused_until_they_end(tmp_path: Path) -> None:
    async with running(tmp_path / "data", take_wait_seconds=1.0) as app:
        endpoint_id = (await app.create_endpoint(workersMax=0))["id"]
        owner = (await app.services.auth.authenticate(ADMIN_KEY)).id
        take = f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0"
        async with await app.worker(endpoint_id) as worker:
            held = [asyncio.create_task(worker.get(take)) for _ in range(MAX_POLLS_PER_WORKER)]
            await eventually_async(
                lambda: app.services.long_polls.held_by(owner) == MAX_POLLS_PER_WORKER,
                "the worker's long-polls all held",
            )
            refused = await worker.get(take)
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            stop = await worker.get(f"/v2/{endpoint_id}/job-stop/w-1")
            assert stop.status_code == 429
            assert [(await t).status_code for t in held] == [204] * MAX_POLLS_PER_WORKER
            assert (await worker.get(take)).status_code == 204
