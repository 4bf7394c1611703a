"""OpenAI-compatible routes: each call becomes a job for an OpenAI-style runpod worker."""

from __future__ import annotations

import json

import httpx
import pytest
from harness import Server

pytestmark = pytest.mark.e2e


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
