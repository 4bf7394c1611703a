"""Keys users make themselves over ``/v1/apikeys``, with permissions, against the real server
(SQLite and PostgreSQL) and the real runpod SDK: made and shown once, listed without secrets,
revoked and refused within the key cache time, each user's own; a read-only key reads but gets
a 401 naming what it lacks on a write, which the SDK reports as its ``AuthenticationError``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from harness import Server, running

from pgtest import PG_DSN, fresh_schema_sync

CACHE_SECONDS = "0.5"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env: dict[str, str | None] = {"SKIFF_KEY_CACHE_SECONDS": CACHE_SECONDS}
    data = tmp_path_factory.mktemp("keys") / "data"
    if request.param == "sqlite":
        with running(data, env=env) as made:
            yield made
        return
    with fresh_schema_sync() as schema:
        env |= {"SKIFF_DATABASE_URL": PG_DSN, "SKIFF_DATABASE_SCHEMA": schema}
        with running(data, env=env) as made:
            yield made


def _user_key(server: Server, user: str) -> str:
    """A key of a new user, made by the operator's CLI on the server's database (either)."""
    made = subprocess.run(
        [sys.executable, "-m", "skiff", "keys", "create", "--user", user],
        capture_output=True,
        text=True,
        check=True,
        env={**server.env(), "SKIFF_DATA_DIR": str(server.data_dir)},
    )
    return made.stdout.strip()


def _as(server: Server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_a_key_is_made_shown_once_listed_without_it_and_revoked(server: Server) -> None:
    made = server.http.post("/v1/apikeys", json={"name": "laptop", "permissions": "all"})
    assert made.status_code == 200, made.text
    body = made.json()
    key = body["key"]
    assert key.startswith("sk_") and body["permissions"] == "all" and body["endpoints"] == {}
    with _as(server, key) as mine:
        assert mine.get("/v1/endpoints").status_code == 200
        listed = server.http.get("/v1/apikeys").json()
        assert body["id"] in [k["id"] for k in listed]
        assert key not in str(listed) and all("key" not in k for k in listed)
        assert server.http.delete(f"/v1/apikeys/{body['id']}").status_code == 204
        server.wait_for(
            lambda: mine.get("/v1/endpoints").status_code == 401,
            timeout=float(CACHE_SECONDS) + 5,
            what="the revoked key to be refused within the key cache time",
        )
    again = server.http.delete(f"/v1/apikeys/{body['id']}")
    assert again.status_code == 409 and "revoked already" in again.json()["message"]
    assert server.http.delete("/v1/apikeys/nosuchkey").status_code == 404


def test_a_read_only_key_reads_and_is_told_what_it_lacks_on_a_write(server: Server) -> None:
    endpoint = server.create_endpoint(name="read-only-target")
    key = server.http.post("/v1/apikeys", json={"name": "ro", "permissions": "read"}).json()["key"]
    with _as(server, key) as ro:
        assert ro.get(f"/v1/endpoints/{endpoint['id']}").status_code == 200
        refused = ro.post("/v1/templates", json={"name": "x", "imageName": "local/worker"})
        assert refused.status_code == 401
        assert "lacks the permission read_write" in refused.json()["message"]
        job = ro.post(f"/v2/{endpoint['id']}/run", json={"input": {}})
        assert job.status_code == 401
        assert job.json()["error"].startswith(
            f"this API key lacks the permission read_write on endpoint {endpoint['id']}"
        )
        assert ro.get(f"/v2/{endpoint['id']}/health").status_code == 200
        # A key makes no key with more rights than its own (nor, read-only, any key at all).
        assert ro.post("/v1/apikeys", json={"name": "up", "permissions": "all"}).status_code == 401


def test_a_restricted_key_reaches_only_its_endpoints(server: Server) -> None:
    mine = server.create_endpoint(name="granted")["id"]
    other = server.create_endpoint(name="not-granted")["id"]
    made = server.http.post(
        "/v1/apikeys",
        json={"name": "ci", "permissions": "restricted", "endpoints": {mine: "read_write"}},
    )
    assert made.status_code == 200, made.text
    assert made.json()["endpoints"] == {mine: "read_write"}
    with _as(server, made.json()["key"]) as ci:
        assert ci.post(f"/v2/{mine}/run", json={"input": {"n": 1}}).status_code == 200
        refused = ci.post(f"/v2/{other}/run", json={"input": {}})
        assert refused.status_code == 401
        assert refused.json()["error"] == (
            f"this API key lacks the permission read_write on endpoint {other}"
        )
        account = ci.get("/v1/templates")
        assert account.status_code == 401 and "on the account" in account.json()["message"]
        graphql = ci.post("/graphql", json={"query": "query { myself { id } }"})
        assert graphql.status_code == 401 and "lacks the permission read" in graphql.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "permissions": "admin"}, "permissions"),
        ({"name": "x", "permissions": "read", "endpoints": {"abc": "read"}}, "endpoints"),
        ({"name": "x", "permissions": "restricted"}, "endpoints"),
        ({"name": "x", "permissions": "restricted", "endpoints": {"nosuch": "read"}}, "endpoints"),
        ({"name": "", "permissions": "all"}, "name"),
    ],
)
def test_bad_key_requests_are_refused_naming_the_field(
    server: Server, body: dict[str, Any], field: str
) -> None:
    before = server.http.get("/v1/apikeys").json()
    refused = server.http.post("/v1/apikeys", json=body)
    assert refused.status_code == 400, refused.text
    assert field in refused.text
    assert server.http.get("/v1/apikeys").json() == before


def test_a_user_sees_and_revokes_only_their_own_keys(server: Server) -> None:
    bob = _user_key(server, "bob-keys")
    with _as(server, bob) as as_bob:
        made = as_bob.post("/v1/apikeys", json={"name": "bob's", "permissions": "read"})
        assert made.status_code == 200
        admins = server.http.get("/v1/apikeys").json()
        assert made.json()["id"] not in [k["id"] for k in admins]
        bobs = as_bob.get("/v1/apikeys").json()
        assert {k["id"] for k in bobs}.isdisjoint(k["id"] for k in admins)
        # Another user's key is as unknown as a made-up one, and stays valid.
        assert as_bob.delete(f"/v1/apikeys/{admins[0]['id']}").status_code == 404
        assert server.http.get("/v1/apikeys").status_code == 200
        assert server.http.delete(f"/v1/apikeys/{made.json()['id']}").status_code == 404
        # Bob's restricted key cannot name the administrator's endpoint.
        theirs = server.create_endpoint(name="admins-own")["id"]
        refused = as_bob.post(
            "/v1/apikeys",
            json={"name": "x", "permissions": "restricted", "endpoints": {theirs: "read"}},
        )
        assert refused.status_code == 400 and f"no endpoint {theirs}" in refused.text


def test_the_sdk_raises_authentication_error_for_a_read_only_keys_mutation(
    server: Server,
) -> None:
    import runpod

    key = server.http.post("/v1/apikeys", json={"name": "sdk", "permissions": "read"}).json()["key"]
    os.environ["RUNPOD_API_BASE_URL"] = server.url
    saved = runpod.api_key
    try:
        assert runpod.get_user(api_key=key)["id"]
        with pytest.raises(runpod.error.AuthenticationError):
            runpod.update_user_settings("ssh-ed25519 AAAA test", api_key=key)
        runpod.api_key = key  # the SDK's global key, as `runpod config` sets it
        with pytest.raises(runpod.error.AuthenticationError):
            runpod.create_template(name="nope", image_name="local/worker")
        assert runpod.get_user()["id"]
    finally:
        runpod.api_key = saved
        os.environ.pop("RUNPOD_API_BASE_URL", None)
