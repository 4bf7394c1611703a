"""Public model endpoints end to end: the administrator turns the ready-made all-MiniLM-L6-v2
on with one command (``skiff models enable``), and other users call it by its model id with the
unmodified runpod SDK and the openai client, each seeing only their own jobs."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx
import numpy as np
import pytest
from harness import Server

MODEL = "all-minilm-l6-v2"


def cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiff", *args],
        capture_output=True,
        text=True,
        env={"SKIFF_API_KEY": server.key, "SKIFF_PUBLIC_URL": server.url, "PATH": ""},
        timeout=120,
    )


def new_key(server: Server, user: str) -> str:
    made = subprocess.run(
        [sys.executable, "-m", "skiff", "keys", "create", "--user", user],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "", "SKIFF_DATA_DIR": str(server.data_dir)},
    )
    return made.stdout.strip()


def as_user(server: Server, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120
    )


@pytest.fixture(scope="module")
def enabled(server: Server) -> dict[str, str]:
    """The model enabled by the administrator; two other users' keys."""
    done = cli(server, "models", "enable", MODEL)
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"/v2/{MODEL}/runsync" in done.stdout
    return {"alice": new_key(server, "alice-models"), "bob": new_key(server, "bob-models")}


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_model_embeds_a_sentence_closer_to_its_paraphrase(
    server: Server, enabled: dict[str, str], runpod_client: Any
) -> None:
    runpod_client.api_key = enabled["alice"]
    try:
        endpoint = runpod_client.Endpoint(MODEL)
        output = endpoint.run_sync(
            {
                "texts": [
                    "A man is eating food.",
                    "A man is eating a piece of bread.",
                    "The girl is carrying a baby.",
                    "This is an example sentence",
                ]
            },
            timeout=120,
        )
    finally:
        runpod_client.api_key = server.key

    eating, bread, baby, example = output["embeddings"]
    assert output["model"] == MODEL and output["dimensions"] == 384
    assert cosine(eating, bread) > 0.6 > cosine(eating, baby)
    assert cosine(eating, bread) > cosine(bread, baby) + 0.5
    # sentence-transformers' own vector for this sentence (the model card's example).
    assert np.allclose(example[:5], [0.0677, 0.0635, 0.0487, 0.0793, 0.0374], atol=2e-3)


def test_each_caller_sees_only_their_own_jobs(server: Server, enabled: dict[str, str]) -> None:
    alice, bob = as_user(server, enabled["alice"]), as_user(server, enabled["bob"])
    job = alice.post(f"/v2/{MODEL}/runsync", json={"input": {"texts": ["mine"]}}).json()
    assert job["status"] == "COMPLETED", job

    assert alice.get(f"/v2/{MODEL}/status/{job['id']}").json()["status"] == "COMPLETED"
    assert bob.get(f"/v2/{MODEL}/status/{job['id']}").status_code == 404
    assert bob.post(f"/v2/{MODEL}/cancel/{job['id']}").status_code == 404
    assert bob.get(f"/v2/{MODEL}/stream/{job['id']}").status_code == 404
    # What would show or touch every caller's jobs stays the owner's.
    assert bob.get(f"/v2/{MODEL}/requests").status_code == 403
    assert bob.post(f"/v2/{MODEL}/purge-queue").status_code == 403
    assert bob.get(f"/v2/{MODEL}/health").status_code == 200
    # The model's endpoint itself stays the administrator's: by its id, nobody else finds it.
    published = server.http.get(f"/v1/models/{MODEL}").json()
    endpoint_id = next(
        e["id"] for e in server.http.get("/v1/endpoints").json() if e["name"] == f"model-{MODEL}"
    )
    assert published["jobUrl"] == f"/v2/{MODEL}/run"
    assert bob.post(f"/v2/{endpoint_id}/run", json={"input": {"texts": ["x"]}}).status_code == 404
    assert server.http.get(f"/v2/{MODEL}/status/{job['id']}").json()["status"] == "COMPLETED"


def test_the_callers_usage_is_billed_to_them_under_the_model_id(
    server: Server, enabled: dict[str, str]
) -> None:
    bob = as_user(server, enabled["bob"])
    job = bob.post(f"/v2/{MODEL}/runsync", json={"input": {"texts": ["billed"] * 8}}).json()
    assert job["status"] == "COMPLETED", job

    def billed() -> list[dict[str, Any]]:
        records = bob.get("/v1/billing/endpoints", params={"bucketSize": "day"}).json()
        return [r for r in records if r["endpointId"] == MODEL]

    records = server.wait_for(billed, timeout=10, what="the call in bob's billing")
    assert sum(r["timeBilledMs"] for r in records) >= job["executionTime"] - 5


def test_the_openai_client_gets_embeddings(server: Server, enabled: dict[str, str]) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v2/{MODEL}/openai/v1", api_key=enabled["alice"])

    answer = client.embeddings.create(model=MODEL, input=["A man is eating food.", "Hello"])

    assert [d.index for d in answer.data] == [0, 1]
    assert len(answer.data[0].embedding) == 384
    assert answer.usage.prompt_tokens > 2
    direct = as_user(server, enabled["alice"]).post(
        f"/v2/{MODEL}/runsync", json={"input": {"texts": ["A man is eating food."]}}
    )
    assert np.allclose(
        answer.data[0].embedding, direct.json()["output"]["embeddings"][0], atol=1e-6
    )


def test_every_user_lists_the_published_models(server: Server, enabled: dict[str, str]) -> None:
    listed = as_user(server, enabled["bob"]).get("/v1/models").json()

    assert [m["modelId"] for m in listed] == [MODEL]
    assert "endpointId" not in listed[0]
    assert "Sentence embeddings" in listed[0]["description"]
    shown = cli(server, "models", "list")
    assert f"{MODEL}  published  /v2/{MODEL}/run" in shown.stdout


def test_only_an_administrator_publishes_or_withdraws(
    server: Server, enabled: dict[str, str]
) -> None:
    bob = as_user(server, enabled["bob"])
    template = bob.post(
        "/v1/templates", json={"name": "bobs", "imageName": "x", "dockerStartCmd": ["true"]}
    ).json()
    endpoint = bob.post("/v1/endpoints", json={"templateId": template["id"]}).json()

    refused = bob.post("/v1/models", json={"modelId": "bobs-model", "endpointId": endpoint["id"]})
    withdraw = bob.delete(f"/v1/models/{MODEL}")
    again = cli(server, "models", "enable", MODEL)
    bad_id = server.http.post("/v1/models", json={"modelId": "Not An Id", "endpointId": "x"})
    not_theirs = server.http.post(
        "/v1/models", json={"modelId": "stolen", "endpointId": endpoint["id"]}
    )

    assert refused.status_code == 403
    assert withdraw.status_code == 403
    assert again.returncode != 0 and "published already" in again.stderr
    assert bad_id.status_code == 400 and bad_id.json()["field"] == "modelId"
    assert not_theirs.status_code == 400 and not_theirs.json()["field"] == "endpointId"


def test_an_endpoint_running_the_flash_worker_is_not_served_to_other_users(
    server: Server, enabled: dict[str, str]
) -> None:
    """The Flash worker runs the code each call sends, with its owner's secrets and volume."""
    admin = server.http

    def endpoint_of(template: dict[str, Any]) -> str:
        made = admin.post("/v1/templates", json=template)
        assert made.status_code == 200, made.text
        body = {"templateId": made.json()["id"], "workersMax": 0}
        return str(admin.post("/v1/endpoints", json=body).json()["id"])

    flash_template = {"name": "flashy", "imageName": "runpod/flash-cpu:py3.12-latest"}
    flash = endpoint_of(flash_template)
    refused = admin.post("/v1/models", json={"modelId": "flashy", "endpointId": flash})
    assert refused.status_code == 400, refused.text
    assert "Flash worker" in refused.json()["message"]

    # Published while it ran something else, then switched to the Flash worker: refused to
    # every caller but its owner from then on.
    plain = endpoint_of({"name": "plain", "imageName": "x", "dockerStartCmd": ["true"]})
    published = admin.post("/v1/models", json={"modelId": "switchy", "endpointId": plain})
    assert published.status_code == 201, published.text
    try:
        flash_id = admin.get(f"/v1/endpoints/{flash}").json()["templateId"]
        switched = admin.patch(f"/v1/endpoints/{plain}", json={"templateId": flash_id})
        assert switched.status_code == 200, switched.text
        call = as_user(server, enabled["bob"]).post("/v2/switchy/run", json={"input": {}})
        assert call.status_code == 403, call.text
        assert "Flash worker" in call.json()["error"]
        assert admin.post(f"/v2/{plain}/run", json={"input": {}}).status_code == 200
    finally:
        admin.delete("/v1/models/switchy")


def test_disabling_withdraws_the_model_and_its_endpoint(
    server: Server, enabled: dict[str, str]
) -> None:
    done = cli(server, "models", "disable", MODEL)

    assert done.returncode == 0, done.stderr
    bob = as_user(server, enabled["bob"])
    assert bob.get("/v1/models").json() == []
    assert bob.post(f"/v2/{MODEL}/run", json={"input": {"texts": ["x"]}}).status_code == 404
    names = [e["name"] for e in server.http.get("/v1/endpoints").json()]
    assert f"model-{MODEL}" not in names
