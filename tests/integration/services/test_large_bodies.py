"""Large worker bodies parsed in a helper process under a memory limit
(``services/large_bodies.py``): a real spawned process, real bodies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from skiff.domain.results import Outcome, parse_worker_result, read_stream_chunk
from skiff.services.large_bodies import LargeBodies

#: Enough for the helper's interpreter and an ordinary large body, far from what tens of
#: millions of values take.
SMALL_LIMIT = 768 * 1024 * 1024
#: 20 million tiny values: about 40 MB of JSON, gigabytes once parsed.
MANY_VALUES = b'{"output": [' + b",".join([b"0"] * 20_000_000) + b"]}"


@pytest.fixture
async def bodies() -> AsyncIterator[LargeBodies]:
    made = LargeBodies(memory_limit=SMALL_LIMIT)
    yield made
    made.close()


async def test_a_large_result_reads_as_it_would_in_the_server(bodies: LargeBodies) -> None:
    body = orjson.dumps({"output": {"image": "x" * 3_000_000, "seed": 7}, "stopPod": True})
    assert await bodies.result(body) == parse_worker_result(body)
    chunk = orjson.dumps({"output": "y" * 2_000_000, "metrics": {"tokens": 3}})
    assert await bodies.chunk(chunk) == read_stream_chunk(chunk)


async def test_a_body_past_the_memory_limit_fails_its_job_and_the_helper_goes_on(
    bodies: LargeBodies,
) -> None:
    result = await bodies.result(MANY_VALUES)
    assert result.outcome is Outcome.FAILED and result.refused
    assert result.error is not None and "too many values to read" in result.error
    chunk = await bodies.chunk(MANY_VALUES)
    assert chunk.refused is not None and "stream chunk holds too many values" in chunk.refused
    # The next body is read as usual.
    body = orjson.dumps({"output": "z" * 2_000_000})
    assert (await bodies.result(body)).output_json == orjson.dumps("z" * 2_000_000).decode()


async def test_a_user_has_two_large_bodies_read_at_a_time(bodies: LargeBodies) -> None:
    entered: list[str] = []
    release = asyncio.Event()

    async def read(user: str, name: str) -> None:
        async with bodies.turn(user):
            entered.append(name)
            await release.wait()

    tasks = [asyncio.create_task(read("u-1", f"a{i}")) for i in range(3)]
    tasks.append(asyncio.create_task(read("u-2", "b0")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert sorted(entered) == ["a0", "a1", "b0"]  # another user's body does not wait
    release.set()
    await asyncio.gather(*tasks)
    assert sorted(entered) == ["a0", "a1", "a2", "b0"]
    assert len(bodies.turns) == 0  # nothing kept of users with nothing waiting
