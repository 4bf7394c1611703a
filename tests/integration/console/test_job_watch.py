"""The request panel's poll (``/console/endpoints/{id}/jobs/{job}/watch.json?after=``): it
reads the stream after the chunk it last showed, without moving the cursor ``/stream`` reads
by, and refuses an ``after`` that is not a whole number."""

from __future__ import annotations

import httpx
import pytest

from in_process import InProcess

JSON = {"Accept": "application/json"}


async def _streaming_job(in_process: InProcess) -> tuple[str, str]:
    """A job of an endpoint without workers, taken by an outside worker that streamed two
    chunks: its endpoint's id and its own."""
    endpoint_id = (await in_process.create_endpoint(workersMax=0))["id"]
    job_id = (await in_process.http.post(f"/v2/{endpoint_id}/run", json={"input": {}})).json()["id"]
    async with await in_process.worker(endpoint_id) as worker:
        await worker.get(f"/v2/{endpoint_id}/job-take/w-1?job_in_progress=0")
        for word in ("one", "two"):
            sent = await worker.post(
                f"/v2/{endpoint_id}/job-stream/w-1/{job_id}", json={"output": word}
            )
            assert sent.status_code == 200, sent.text
    return endpoint_id, job_id


async def test_the_panel_reads_after_what_it_showed_and_leaves_stream_its_chunks(
    in_process: InProcess, console: httpx.AsyncClient
) -> None:
    endpoint_id, job_id = await _streaming_job(in_process)
    watch = f"/console/endpoints/{endpoint_id}/jobs/{job_id}/watch.json"
    first = (await console.get(watch, params={"after": "0"}, headers=JSON)).json()
    assert [c["output"] for c in first["stream"]] == ["one", "two"]
    later = (await console.get(watch, params={"after": str(first["next"])}, headers=JSON)).json()
    assert later["stream"] == [] and later["next"] == first["next"]
    # /stream still hands out both: the panel only looked.
    streamed = (await in_process.http.get(f"/v2/{endpoint_id}/stream/{job_id}")).json()
    assert [c["output"] for c in streamed["stream"]] == ["one", "two"]


@pytest.mark.parametrize("after", ["-1", "abc", "1.5", "1e3", "9" * 19, " 1"])
async def test_an_after_that_is_not_a_whole_number_is_refused(
    in_process: InProcess, console: httpx.AsyncClient, after: str
) -> None:
    endpoint_id, job_id = await _streaming_job(in_process)
    watch = f"/console/endpoints/{endpoint_id}/jobs/{job_id}/watch.json"
    refused = await console.get(watch, params={"after": after}, headers=JSON)
    assert refused.status_code == 400, refused.text
    assert "after must be a whole number" in refused.json()["error"]
