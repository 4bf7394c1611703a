"""A streamed OpenAI-route call holds its caller's concurrency slot for as long as it streams
(its job's life), as a call that waits for its answer does: a stream was let go of its slot
before its first byte, so one key could hold any number of them open."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eventually import eventually_async
from in_process import ADMIN_KEY, running

CHAT = "/openai/v1/chat/completions"


async def test_a_streamed_call_holds_its_slot_until_its_job_ends(tmp_path: Path) -> None:
    async with running(tmp_path / "data") as app:
        endpoint_id = (await app.create_endpoint(workersMax=0))["id"]
        admin = await app.services.auth.authenticate(ADMIN_KEY)
        limits = app.services.rate_limits

        def in_flight() -> int:
            return limits.in_flight(admin.id, endpoint_id, "openai")

        url = f"/v2/{endpoint_id}{CHAT}"
        call = asyncio.create_task(
            app.http.post(url, json={"messages": [], "stream": True}, timeout=30)
        )
        await eventually_async(lambda: in_flight() == 1, "the stream holding its slot")
        async with await app.worker(endpoint_id) as worker:
            taken = await worker.get(f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0")
            job_id = taken.json()["id"]
            await worker.post(
                f"/v2/{endpoint_id}/job-stream/w-1/{job_id}", json={"output": {"text": "hi"}}
            )
            assert in_flight() == 1  # still streaming: the job runs
            await worker.post(f"/v2/{endpoint_id}/job-done/w-1/{job_id}", json={"output": None})
        answer = await call
        assert answer.status_code == 200 and "hi" in answer.text
        await eventually_async(lambda: in_flight() == 0, "the slot let go with the stream")


async def test_a_stream_its_caller_leaves_lets_its_slot_go(tmp_path: Path) -> None:
    async with running(tmp_path / "data") as app:
        endpoint_id = (await app.create_endpoint(workersMax=0))["id"]
        admin = await app.services.auth.authenticate(ADMIN_KEY)
        limits = app.services.rate_limits
        url = f"/v2/{endpoint_id}{CHAT}"
        calls = [
            asyncio.create_task(app.http.post(url, json={"messages": [], "stream": True}))
            for _ in range(3)
        ]
        await eventually_async(
            lambda: limits.in_flight(admin.id, endpoint_id, "openai") == 3, "three streams"
        )
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        await eventually_async(
            lambda: limits.in_flight(admin.id, endpoint_id, "openai") == 0, "their slots let go"
        )
