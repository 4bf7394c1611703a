"""Secrets end to end in a real ``skiff serve``: a template's ``{{ RUNPOD_SECRET_name }}``
reaches a real runpod-SDK worker's environment (and a pod's, with the owner's public SSH key as
``PUBLIC_KEY``) and nothing else: not the API's answers, not the server's log, not the database
file; a changed secret rolls the worker, and a running job keeps the value its worker started
with."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, running

from pgtest import PG_DSN
from pod_programs import pod_port

VALUE = "hf_live_7c1e5a"
ROTATED = "hf_live_rotated_3b9d"
PUB_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOe2e me@laptop"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("secrets") / "data") as srv:
        yield srv


def make_secret(server: Server, name: str, value: str) -> dict[str, Any]:
    made = server.http.post("/v1/secrets", json={"name": name, "value": value})
    assert made.status_code == 200, made.text
    return dict(made.json())


def ask(server: Server, endpoint_id: str, **job_input: Any) -> dict[str, Any]:
    answer = server.http.post(f"/v2/{endpoint_id}/runsync", json={"input": job_input}, timeout=120)
    body = answer.json()
    assert body["status"] == "COMPLETED", body
    return dict(body["output"])


def test_a_secret_reaches_the_workers_environment_and_a_change_rolls_it(
    server: Server, runpod_client: Any
) -> None:
    secret = make_secret(server, "hf_token", VALUE)
    template = server.create_template(
        "env_worker.py",
        env={
            "HF_TOKEN": "{{ RUNPOD_SECRET_hf_token }}",
            "URL": "https://x/{{RUNPOD_SECRET_hf_token}}/",
        },
    )
    made = server.http.post(
        "/v1/endpoints",
        json={"templateId": template["id"], "computeType": "CPU", "workersMax": 1},
    )
    endpoint = made.json()
    # Through the unmodified SDK, as a user's client would.
    sdk = runpod_client.Endpoint(endpoint["id"])
    out = sdk.run_sync({"names": ["HF_TOKEN", "URL"]}, timeout=120)
    assert out == {"HF_TOKEN": VALUE, "URL": f"https://x/{VALUE}/"}

    # A job running when the secret changes ends with the value its worker started with.
    running_job = sdk.run({"names": ["HF_TOKEN"], "sleep": 4})
    server.wait_for(lambda: running_job.status() == "IN_PROGRESS", what="the job to run")
    changed = server.http.patch(f"/v1/secrets/{secret['id']}", json={"value": ROTATED})
    assert changed.status_code == 200
    assert running_job.output(timeout=60) == {"HF_TOKEN": VALUE}
    # Its successor, which the change rolled in, has the new value.
    server.wait_for(
        lambda: ask(server, endpoint["id"], names=["HF_TOKEN"]) == {"HF_TOKEN": ROTATED},
        what="a worker with the new value",
        timeout=90,
    )

    # Nothing answers with the value, or logs it.
    shown = [
        server.http.get("/v1/secrets").text,
        server.http.get(f"/v1/templates/{template['id']}").text,
        server.http.get(f"/v1/endpoints/{endpoint['id']}", params={"includeTemplate": "true"}).text,
    ]
    for text in shown:
        assert VALUE not in text and ROTATED not in text
    assert "RUNPOD_SECRET_hf_token" in shown[1]
    log = server.log_path.read_text()
    assert VALUE not in log and ROTATED not in log


def test_no_secret_is_in_the_database_file_in_clear(server: Server) -> None:
    make_secret(server, "db_check", "db-check-value-51aa")
    server.http.post(
        "/v1/containerregistryauth",
        json={"name": "reg", "username": "me", "password": "registry-pass-9e0c"},
    )
    endpoint = server.create_endpoint(workersMax=1)
    s3 = {"accessId": "id", "accessSecret": "s3-secret-4f7b", "bucketName": "b"}
    server.http.post(f"/v2/{endpoint['id']}/run", json={"input": {}, "s3Config": s3})
    database = server.data_dir / "skiff.db"
    stored = b"".join(
        p.read_bytes() for p in (database, database.with_name("skiff.db-wal")) if p.exists()
    )
    assert b"db_check" in stored  # the name is there (it was written)
    for clear in ("db-check-value-51aa", "registry-pass-9e0c", "s3-secret-4f7b"):
        assert clear.encode() not in stored


def test_a_pg_dump_holds_no_secret_in_clear(tmp_path: Path, schema: str) -> None:
    """The same on PostgreSQL: what a replica saved, read back with pg_dump."""
    env: dict[str, str | None] = {"SKIFF_DATABASE_URL": PG_DSN, "SKIFF_DATABASE_SCHEMA": schema}
    with running(tmp_path / "data", env=env) as pg_server:
        make_secret(pg_server, "pg_check", "pg-check-value-0b2d")
        pg_server.http.post(
            "/v1/containerregistryauth",
            json={"name": "reg", "username": "me", "password": "pg-registry-pass-77aa"},
        )
        endpoint = pg_server.create_endpoint(workersMax=0)
        s3 = {"accessId": "id", "accessSecret": "pg-s3-secret-c3d1", "bucketName": "b"}
        run = pg_server.http.post(f"/v2/{endpoint['id']}/run", json={"input": {}, "s3Config": s3})
        assert run.status_code == 200, run.text
        webhook_secret = pg_server.http.get("/v1/webhooksecret").json()["secret"]
        dumped = subprocess.run(
            ["pg_dump", "--dbname", PG_DSN, "--schema", schema, "--data-only"],
            capture_output=True,
            check=True,
        ).stdout
    assert b"pg_check" in dumped and b"pg-registry-pass" not in dumped
    for clear in ("pg-check-value-0b2d", "pg-s3-secret-c3d1", webhook_secret):
        assert clear.encode() not in dumped


def test_a_pod_gets_its_secrets_and_the_owners_public_key(server: Server) -> None:
    make_secret(server, "pod_token", VALUE)
    assert server.http.patch("/v1/user", json={"pubKey": PUB_KEY}).status_code == 200
    port = pod_port()
    program = (
        "import http.server, json, os, sys\n"
        "class A(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        body = json.dumps({k: os.environ.get(k) for k in ('TOKEN', 'PUBLIC_KEY')})\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(body.encode())\n"
        "http.server.HTTPServer(('0.0.0.0', int(sys.argv[1])), A).serve_forever()\n"
    )
    made = server.http.post(
        "/v1/pods",
        json={
            "name": "ssh-box",
            "imageName": "local/python",
            "computeType": "CPU",
            "dockerStartCmd": [sys.executable, "-c", program, str(port)],
            "ports": [f"{port}/http"],
            "env": {"TOKEN": "{{ RUNPOD_SECRET_pod_token }}"},
        },
    )
    assert made.status_code == 201, made.text
    assert VALUE not in made.text

    def answer() -> dict[str, Any] | None:
        pod = server.http.get(f"/v1/pods/{made.json()['id']}").json()
        if pod["status"] != "running":
            return None
        try:
            return dict(httpx.get(pod["urls"][f"{port}/http"], timeout=2).json())
        except httpx.TransportError:
            return None

    inside = server.wait_for(answer, what="the pod to answer")
    assert inside == {"TOKEN": VALUE, "PUBLIC_KEY": PUB_KEY}
    # GraphQL (the SDK's runpod.get_pods) shows the reference, not the value.
    graphql = server.http.post("/graphql", json={"query": "{ myself { pods { id env } } }"})
    assert "RUNPOD_SECRET_pod_token" in graphql.text and VALUE not in graphql.text
    server.http.delete(f"/v1/pods/{made.json()['id']}")


def test_a_pod_referring_to_no_such_secret_is_refused(server: Server) -> None:
    refused = server.http.post(
        "/v1/pods",
        json={
            "imageName": "local/python",
            "computeType": "CPU",
            "dockerStartCmd": ["true"],
            "env": {"TOKEN": "{{ RUNPOD_SECRET_nowhere }}"},
        },
    )
    assert refused.status_code == 400 and "nowhere" in refused.json()["message"]
