"""OpenAI-compatible routes: each call becomes a job for an OpenAI-style runpod worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, running

from eventually import eventually_async


@pytest.fixture(scope="module")
def endpoint_id(server: Server) -> str:
    return str(server.create_endpoint("openai_worker.py", workersMax=1, idleTimeout=30)["id"])


def test_chat_completion_answers_the_workers_output(server: Server, endpoint_id: str) -> None:
    response = server.http.post(
        f"/v2/{endpoint_id}/openai/v1/chat/completions",
        json={"model": "echo-1", "messages": [{"role": "user", "content": "hello there"}]},
        timeout=90,
    )
    assert response.status_code == 200
    # The worker's one yielded answer, unwrapped from the aggregate list.
    assert response.json()["choices"][0]["message"]["content"] == "hello there"


def test_streaming_chat_completion_relays_server_sent_events(
    server: Server, endpoint_id: str
) -> None:
    with server.http.stream(
        "POST",
        f"/v2/{endpoint_id}/openai/v1/chat/completions",
        json={
            "model": "echo-1",
            "stream": True,
            "messages": [{"role": "user", "content": "a b c"}],
        },
        timeout=90,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    words = [json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events[:-1]]
    assert words == ["a", "b", "c"]


def test_models_lists_the_workers_models(server: Server, endpoint_id: str) -> None:
    response = server.http.get(f"/v2/{endpoint_id}/openai/v1/models", timeout=90)
    assert response.json()["data"][0]["id"] == "echo-1"


def test_a_body_that_is_not_json_is_400(server: Server, endpoint_id: str) -> None:
    response = server.http.post(
        f"/v2/{endpoint_id}/openai/v1/completions", content=b"{nope", timeout=10
    )
    assert response.status_code == 400
    assert response.json()["field"] == "body"


def test_openai_routes_need_a_key(server: Server, endpoint_id: str) -> None:
    response = httpx.get(f"{server.url}/v2/{endpoint_id}/openai/v1/models")
    assert response.status_code == 401


async def test_callers_that_go_away_free_their_slots_at_once_and_their_jobs_are_cancelled(
    server: Server,
) -> None:
    # No worker: every call waits for an answer, holding one of the 400 concurrent slots.
    endpoint = str(server.create_endpoint(workersMax=0)["id"])
    path = f"/v2/{endpoint}/openai/v1/chat/completions"
    body = b'{"model": "echo-1", "messages": []}'
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    callers = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(400)]
    for _, writer in callers:
        writer.write(head + body)
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=10
    ) as client:

        async def jobs() -> dict[str, int]:
            return dict((await client.get(f"/v2/{endpoint}/health")).json()["jobs"])

        await _until(lambda counts: counts["inQueue"] == 400, jobs, "all 400 jobs queued")
        refused = await client.post(path, content=body)
        assert refused.status_code == 429  # every slot is held

        for _, writer in callers:
            writer.close()
        counts = await _until(
            lambda counts: counts["cancelled"] == 400, jobs, "all 400 jobs cancelled"
        )
        assert counts["inQueue"] == 0
        # A new caller is let in (a stream answers its head at once) instead of a 429.
        async with client.stream(
            "POST", path, json={"model": "echo-1", "messages": [], "stream": True}
        ) as admitted:
            assert admitted.status_code == 200


async def _until(
    done: Callable[[dict[str, int]], bool],
    read: Callable[[], Awaitable[dict[str, int]]],
    what: str,
) -> dict[str, int]:
    async def counts() -> dict[str, int] | None:
        value = await read()
        return value if done(value) else None

    # 30 s: far under the 300 s a held slot used to last, so a slot kept that long fails.
    return await eventually_async(counts, what, timeout=30, interval=0.2)


# -- with the real openai client ------------------------------------------------------------


@pytest.fixture(scope="module")
def client(server: Server, endpoint_id: str) -> Any:
    from openai import OpenAI

    return OpenAI(
        base_url=f"{server.url}/v2/{endpoint_id}/openai/v1", api_key=server.key, timeout=90
    )


def test_the_openai_client_chats_and_completes_with_and_without_streaming(client: Any) -> None:
    chat = client.chat.completions.create(
        model="echo-1", messages=[{"role": "user", "content": "hello there"}]
    )
    assert chat.choices[0].message.content == "hello there"
    streamed = client.chat.completions.create(
        model="echo-1", messages=[{"role": "user", "content": "a b c"}], stream=True
    )
    assert [c.choices[0].delta.content for c in streamed] == ["a", "b", "c"]
    completion = client.completions.create(model="echo-1", prompt="once upon")
    assert completion.choices[0].text == "once upon"
    streamed = client.completions.create(model="echo-1", prompt="x y", stream=True)
    assert [c.choices[0].text for c in streamed] == ["x", "y"]


def test_a_worker_error_is_an_openai_error_and_runs_the_request_once(
    client: Any, server: Server, endpoint_id: str
) -> None:
    import openai

    def jobs() -> int:
        listed = server.http.get(f"/v2/{endpoint_id}/requests", params={"limit": 200})
        return len(listed.json()["requests"])

    before = jobs()
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="fail", messages=[{"role": "user", "content": "hi"}])
    assert "the model ran out of GPU memory" in str(raised.value)
    assert raised.value.response.headers["x-should-retry"] == "false"
    # The client did not send it again: one job more on the endpoint. (Counted by the server:
    # the worker, in its sandbox, cannot write a file of the host's.)
    assert jobs() == before + 1


def test_a_two_megabyte_event_is_relayed_whole(client: Any) -> None:
    streamed = client.chat.completions.create(
        model="big", messages=[{"role": "user", "content": "big"}], stream=True
    )
    (chunk,) = list(streamed)
    assert chunk.choices[0].delta.content == "x" * 2 * 1024 * 1024


def test_embeddings_and_models_answer_as_the_worker_does(client: Any) -> None:
    embedded = client.embeddings.create(model="echo-1", input=["abc", "de"])
    assert [e.embedding for e in embedded.data] == [[3.0, 0.5], [2.0, 0.5]]
    assert [m.id for m in client.models.list()] == ["echo-1"]
    assert client.models.retrieve("echo-1").id == "echo-1"


def test_a_route_no_worker_serves_is_an_openai_404(client: Any) -> None:
    import openai

    with pytest.raises(openai.NotFoundError) as raised:
        client.images.generate(prompt="a cat")
    assert "is not served here" in str(raised.value)


@pytest.fixture(scope="module")
def unsandboxed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose workers may write a file of the host's (the sandbox binds the checkout
    read-only): how a test sees what a worker did while it did it. A worker that keeps a stopped
    job is ended only after two minutes, so only its stop signal can stop it within a test."""
    env: dict[str, str | None] = {"SKIFF_SANDBOX": "off", "SKIFF_STOP_GRACE_SECONDS": "120"}
    with running(tmp_path_factory.mktemp("skiff") / "data", env=env) as srv:
        yield srv


def test_a_stream_closed_early_stops_the_worker_yielding(
    unsandboxed: Server, tmp_path: Path
) -> None:
    """The caller leaves after two events: the job is cancelled and its worker told to stop,
    as ``/cancel`` does, instead of yielding the rest for nobody."""
    server = unsandboxed
    eid = str(server.create_endpoint("openai_worker.py", workersMax=1, idleTimeout=30)["id"])
    record = tmp_path / "yields.txt"
    events = 300  # 30 s of yielding if nothing stops it

    def yielded() -> int:
        return len(record.read_text().split()) if record.exists() else 0

    with server.http.stream(
        "POST",
        f"/v2/{eid}/openai/v1/chat/completions",
        json={"model": "slow", "stream": True, "events": events, "record": str(record)},
        timeout=90,
    ) as response:
        lines = (line for line in response.iter_lines() if line.startswith("data: "))
        assert [next(lines), next(lines)] == [
            f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': str(i)}}]})}"
            for i in range(2)
        ]
    seen: list[int] = []

    def stopped_yielding() -> bool:
        # Still for a whole second (ten of its yields): the worker stopped.
        seen.append(yielded())
        return len(seen) > 10 and seen[-1] == seen[-11]

    server.wait_for(stopped_yielding, timeout=15, what="the worker to stop yielding")
    # Told at once, it stops within a yield or two; a generous three seconds' worth. Untold, it
    # would learn only when its job-stop long-poll (20 s, begun as it started for this call)
    # came round.
    assert seen[-1] <= 2 + 30, seen
    (job,) = server.http.get(f"/v2/{eid}/requests").json()["requests"]
    assert job["status"] == "CANCELLED", job
