"""The /v1 management REST interface over HTTP, as curl would use it."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from harness import Server

#: How /v1 prints a time: ISO 8601, UTC, milliseconds, Z.
ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture(scope="module")
def other_key(server: Server) -> str:
    """A second user's key, made with the CLI against the running server's data directory."""
    return server.user_key("bob")


def test_healthz_answers_without_a_key(server: Server) -> None:
    assert httpx.get(f"{server.url}/healthz").status_code == 200


@pytest.mark.parametrize("path", ["/v1/endpoints", "/v1/templates", "/v1/containerregistryauth"])
def test_management_without_a_key_is_401_json(server: Server, path: str) -> None:
    response = httpx.get(f"{server.url}{path}")
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/json")
    assert "message" in response.json()


def test_a_bad_key_is_401_on_the_job_interface(server: Server) -> None:
    endpoint = server.create_endpoint(workersMax=0)
    response = httpx.post(
        f"{server.url}/v2/{endpoint['id']}/run",
        json={"input": {}},
        headers={"Authorization": "Bearer nope"},
    )
    assert response.status_code == 401
    assert "error" in response.json()


def test_the_job_interface_accepts_the_raw_key_without_bearer(server: Server) -> None:
    endpoint = server.create_endpoint(workersMax=0)
    response = httpx.post(
        f"{server.url}/v2/{endpoint['id']}/run",
        json={"input": {"x": 1}},
        headers={"Authorization": server.key},
    )
    assert response.status_code == 200
    assert response.json()["status"] == "IN_QUEUE"


def test_registry_auth_password_is_never_returned(server: Server) -> None:
    created = server.http.post(
        "/v1/containerregistryauth",
        json={"name": "dockerhub", "username": "me", "password": "s3cret"},
    )
    assert created.status_code == 200
    body = created.json()
    assert set(body) == {"id", "name"}
    listed = server.http.get("/v1/containerregistryauth").json()
    assert {"id": body["id"], "name": "dockerhub"} in listed
    assert "s3cret" not in server.http.get(f"/v1/containerregistryauth/{body['id']}").text
    duplicate = server.http.post(
        "/v1/containerregistryauth", json={"name": "dockerhub", "username": "x", "password": "y"}
    )
    assert duplicate.status_code == 409
    assert server.http.delete(f"/v1/containerregistryauth/{body['id']}").status_code == 204
    assert server.http.get(f"/v1/containerregistryauth/{body['id']}").status_code == 404


def test_template_defaults_and_both_update_forms(server: Server) -> None:
    created = server.http.post(
        "/v1/templates", json={"name": "tpl-defaults", "imageName": "repo/img:1"}
    ).json()
    assert created["category"] == "NVIDIA"
    assert created["containerDiskInGb"] == 50
    assert created["volumeInGb"] == 20
    assert created["volumeMountPath"] == "/workspace"
    assert created["dockerEntrypoint"] == [] and created["env"] == {}
    patched = server.http.patch(f"/v1/templates/{created['id']}", json={"readme": "hi"}).json()
    assert patched["readme"] == "hi"
    posted = server.http.post(
        f"/v1/templates/{created['id']}/update", json={"env": {"A": "1"}}
    ).json()
    assert posted["env"] == {"A": "1"} and posted["readme"] == "hi"
    assert server.http.delete(f"/v1/templates/{created['id']}").status_code == 204


def test_template_in_use_cannot_be_deleted(server: Server) -> None:
    endpoint = server.create_endpoint(workersMax=0)
    response = server.http.delete(f"/v1/templates/{endpoint['templateId']}")
    assert response.status_code == 409
    assert endpoint["id"] in response.json()["message"]


def test_endpoint_gets_every_default(server: Server) -> None:
    template = server.create_template("echo_worker.py")
    body = server.http.post("/v1/endpoints", json={"templateId": template["id"]}).json()
    expected = {
        "computeType": "GPU",
        "gpuCount": 1,
        "idleTimeout": 5,
        "scalerType": "QUEUE_DELAY",
        "scalerValue": 4,
        "workersMin": 0,
        "workersMax": 3,
        "executionTimeoutMs": 600000,
        "flashboot": False,
        "vcpuCount": 2,
        "version": 1,
        "gpuTypeIds": [],
        "env": {},
    }
    assert {k: body[k] for k in expected} == expected
    assert body["id"] and body["userId"] and body["createdAt"]
    server.http.delete(f"/v1/endpoints/{body['id']}")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("idleTimeout", 0),
        ("idleTimeout", 3601),
        ("scalerValue", 0),
        ("gpuCount", 0),
        ("workersMax", -1),
        ("scalerType", "SOMETIMES"),
        ("computeType", "TPU"),
        ("executionTimeoutMs", 10),
        ("name", "x" * 192),
        ("cpuFlavorIds", ["cpu9z"]),
    ],
)
def test_a_bad_endpoint_value_is_400_naming_the_field(
    server: Server, field: str, value: Any
) -> None:
    template = server.create_template("echo_worker.py")
    response = server.http.post("/v1/endpoints", json={"templateId": template["id"], field: value})
    assert response.status_code == 400
    assert field in response.json()["message"]


def test_workers_min_above_max_is_refused(server: Server) -> None:
    template = server.create_template("echo_worker.py")
    response = server.http.post(
        "/v1/endpoints", json={"templateId": template["id"], "workersMin": 3, "workersMax": 1}
    )
    assert response.status_code == 400
    assert "workersMin" in response.json()["message"]


def test_endpoint_with_an_unknown_template_is_refused(server: Server) -> None:
    response = server.http.post("/v1/endpoints", json={"templateId": "nope"})
    assert response.status_code == 400
    assert response.json()["field"] == "templateId"


def test_endpoint_update_bumps_version_only_when_workers_must_roll(server: Server) -> None:
    endpoint = server.create_endpoint(workersMax=0)
    resized = server.http.patch(f"/v1/endpoints/{endpoint['id']}", json={"workersMax": 0}).json()
    assert resized["version"] == 1
    env = server.http.post(
        f"/v1/endpoints/{endpoint['id']}/update", json={"env": {"MODEL": "b"}}
    ).json()
    assert env["version"] == 2 and env["env"] == {"MODEL": "b"}
    fetched = server.http.get(
        f"/v1/endpoints/{endpoint['id']}", params={"includeTemplate": "true"}
    ).json()
    assert fetched["template"]["id"] == endpoint["templateId"]


def test_another_users_resources_answer_404(server: Server, other_key: str) -> None:
    endpoint = server.create_endpoint(workersMax=0)
    job = server.http.post(f"/v2/{endpoint['id']}/run", json={"input": {}}).json()
    bob = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {other_key}"})
    assert bob.get(f"/v1/endpoints/{endpoint['id']}").status_code == 404
    assert bob.get(f"/v1/templates/{endpoint['templateId']}").status_code == 404
    assert bob.get(f"/v2/{endpoint['id']}/status/{job['id']}").status_code == 404
    assert bob.post(f"/v2/{endpoint['id']}/run", json={"input": {}}).status_code == 404
    assert endpoint["id"] not in [e["id"] for e in bob.get("/v1/endpoints").json()]


def test_deleting_an_endpoint_stops_workers_and_removes_jobs_and_logs(server: Server) -> None:
    endpoint = server.create_endpoint(workersMin=1, workersMax=1, idleTimeout=30)
    eid = endpoint["id"]
    done = server.http.post(f"/v2/{eid}/runsync", json={"input": {"x": 1}}).json()
    assert done["status"] == "COMPLETED"
    with_workers = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"})
    workers = with_workers.json()["workers"]
    assert len(workers) == 1 and workers[0]["state"] in ("idle", "running")
    log_dir = server.data_dir / "logs" / eid
    assert any(log_dir.glob("*.log"))
    assert server.http.delete(f"/v1/endpoints/{eid}").status_code == 204
    assert server.http.get(f"/v1/endpoints/{eid}").status_code == 404
    assert server.http.get(f"/v2/{eid}/status/{done['id']}").status_code == 404
    assert not log_dir.exists()


def test_every_v1_time_is_iso_8601_utc_with_milliseconds(server: Server) -> None:
    endpoint = server.create_endpoint(workersMin=1, workersMax=1, idleTimeout=30)
    eid = endpoint["id"]
    done = server.http.post(f"/v2/{eid}/runsync", json={"input": {"x": 1}}).json()
    assert done["status"] == "COMPLETED"
    body = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"}).json()
    worker = body["workers"][0]
    times = [endpoint["createdAt"], body["createdAt"], worker["startedAt"], worker["lastSeen"]]
    for value in times:
        assert ISO_MS.fullmatch(value), value
    server.http.delete(f"/v1/endpoints/{eid}")


def test_openapi_describes_every_v1_operation(server: Server) -> None:
    doc = httpx.get(f"{server.url}/v1/openapi.json").json()
    assert doc["openapi"] == "3.0.3"
    assert doc["info"]["version"] == "0.1.0"
    ops = {(m.upper(), p) for p, item in doc["paths"].items() for m in item}
    expected = {
        ("POST", "/containerregistryauth"),
        ("GET", "/containerregistryauth"),
        ("GET", "/containerregistryauth/{auth_id}"),
        ("DELETE", "/containerregistryauth/{auth_id}"),
        ("POST", "/templates"),
        ("GET", "/templates"),
        ("GET", "/templates/{template_id}"),
        ("PATCH", "/templates/{template_id}"),
        ("POST", "/templates/{template_id}/update"),
        ("DELETE", "/templates/{template_id}"),
        ("POST", "/endpoints"),
        ("GET", "/endpoints"),
        ("GET", "/endpoints/{endpoint_id}"),
        ("PATCH", "/endpoints/{endpoint_id}"),
        ("POST", "/endpoints/{endpoint_id}/update"),
        ("DELETE", "/endpoints/{endpoint_id}"),
    }
    assert expected <= ops
    assert '"type": "null"' not in httpx.get(f"{server.url}/v1/openapi.json").text.replace(
        '":"', '": "'
    )


def test_docs_render_without_internet(server: Server) -> None:
    page = httpx.get(f"{server.url}/v1/docs")
    assert page.status_code == 200
    assert "swagger" in page.text.lower()
    assert "cdn." not in page.text
    v2 = httpx.get(f"{server.url}/v2/openapi.json").json()
    assert "/{endpoint_id}/runsync" in v2["paths"]


def test_the_management_api_takes_the_key_only_after_bearer(server: Server) -> None:
    # /v1 is the hosted platform's REST API, whose one security scheme is HTTP bearer; only the
    # job interface also takes the key alone (above).
    bare = httpx.get(f"{server.url}/v1/endpoints", headers={"Authorization": server.key})
    assert bare.status_code == 401
    assert "Bearer" in bare.json()["message"]
    empty = httpx.get(f"{server.url}/v1/endpoints", headers={"Authorization": "Bearer"})
    assert empty.status_code == 401
    any_case = httpx.get(
        f"{server.url}/v1/endpoints", headers={"Authorization": f"bearer {server.key}"}
    )
    assert any_case.status_code == 200
