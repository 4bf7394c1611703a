"""``/v1/secrets`` and ``/v1/user`` through the in-process app: a secret's value is never shown
back, references to it are checked when a template or pod is saved, a changed secret rolls the
endpoints that refer to it, and another user's secret is a 404."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from in_process import InProcess

VALUE = "hf_value_0d9f3c"


async def make_secret(in_process: InProcess, name: str = "hf_token", value: str = VALUE) -> Any:
    made = await in_process.http.post("/v1/secrets", json={"name": name, "value": value})
    assert made.status_code == 200, made.text
    return made.json()


async def template_with_env(in_process: InProcess, env: dict[str, str]) -> httpx.Response:
    return await in_process.http.post(
        "/v1/templates",
        json={"name": "tpl", "imageName": "local/worker", "dockerStartCmd": ["true"], "env": env},
    )


async def other_user(in_process: InProcess) -> httpx.AsyncClient:
    issued = await in_process.services.auth.issue_key("bob", False, "")
    return httpx.AsyncClient(
        transport=in_process.transport,
        base_url=str(in_process.http.base_url),
        headers={"Authorization": f"Bearer {issued.key}"},
    )


async def test_a_secret_is_listed_by_name_and_dates_never_its_value(in_process: InProcess) -> None:
    made = await make_secret(in_process)
    assert set(made) == {"id", "name", "createdAt", "updatedAt"}
    assert made["name"] == "hf_token" and made["createdAt"].endswith("Z")
    listed = await in_process.http.get("/v1/secrets")
    got = await in_process.http.get(f"/v1/secrets/{made['id']}")
    assert listed.json() == [made] and got.json() == made
    for answer in (listed, got):
        assert VALUE not in answer.text


async def test_a_secrets_value_changes_and_it_is_deleted(in_process: InProcess) -> None:
    made = await make_secret(in_process)
    changed = await in_process.http.patch(f"/v1/secrets/{made['id']}", json={"value": "new"})
    assert changed.status_code == 200 and "new" not in changed.text
    assert changed.json()["updatedAt"] >= made["updatedAt"]
    user = await in_process.services.auth.authenticate("skiff-in-process-admin-key")
    assert await in_process.services.store.user_secret_values(user.id) == {"hf_token": "new"}
    assert (await in_process.http.delete(f"/v1/secrets/{made['id']}")).status_code == 204
    assert (await in_process.http.get(f"/v1/secrets/{made['id']}")).status_code == 404


async def test_another_users_secret_is_not_found(in_process: InProcess) -> None:
    made = await make_secret(in_process)
    async with await other_user(in_process) as bob:
        assert (await bob.get("/v1/secrets")).json() == []
        for method, body in (("GET", None), ("PATCH", {"value": "x"}), ("DELETE", None)):
            answer = await bob.request(method, f"/v1/secrets/{made['id']}", json=body)
            assert answer.status_code == 404, (method, answer.text)
        # Bob's own secret of the same name is his.
        own = await bob.post("/v1/secrets", json={"name": "hf_token", "value": "bob's"})
        assert own.status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "has space", "value": "v"}, "name"),
        ({"name": "", "value": "v"}, "name"),
        ({"name": "ok", "value": ""}, "value"),
        ({"name": "ok"}, "value"),
        ({"name": "ok", "value": "v", "extra": 1}, "extra"),
    ],
)
async def test_a_bad_secret_is_refused_naming_the_field(
    in_process: InProcess, body: dict[str, Any], field: str
) -> None:
    answer = await in_process.http.post("/v1/secrets", json=body)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["field"]
    assert (await in_process.http.get("/v1/secrets")).json() == []


async def test_a_name_taken_is_a_conflict(in_process: InProcess) -> None:
    await make_secret(in_process)
    again = await in_process.http.post("/v1/secrets", json={"name": "hf_token", "value": "2"})
    assert again.status_code == 409


async def test_a_template_referring_to_no_such_secret_is_refused_naming_it(
    in_process: InProcess,
) -> None:
    answer = await template_with_env(in_process, {"TOKEN": "{{ RUNPOD_SECRET_missing }}"})
    assert answer.status_code == 400
    assert answer.json()["field"] == "env"
    assert "missing" in answer.json()["message"]
    assert (await in_process.http.get("/v1/templates")).json() == []


@pytest.mark.parametrize(
    "reference",
    ["{{ RUNPOD_SECRET_hf_token }}", "{{RUNPOD_SECRET_hf_token}}", "{{  RUNPOD_SECRET_hf_token}}"],
)
async def test_a_template_shows_its_reference_never_the_value(
    in_process: InProcess, reference: str
) -> None:
    await make_secret(in_process)
    saved = await template_with_env(in_process, {"TOKEN": reference, "URL": f"x/{reference}"})
    assert saved.status_code == 200, saved.text
    shown = await in_process.http.get(f"/v1/templates/{saved.json()['id']}")
    assert shown.json()["env"] == {"TOKEN": reference, "URL": f"x/{reference}"}
    assert VALUE not in saved.text + shown.text


async def test_a_changed_secret_rolls_the_endpoints_that_refer_to_it(
    in_process: InProcess,
) -> None:
    secret = await make_secret(in_process)
    template = await template_with_env(in_process, {"TOKEN": "{{ RUNPOD_SECRET_hf_token }}"})
    body = {"templateId": template.json()["id"], "computeType": "CPU"}
    using = (await in_process.http.post("/v1/endpoints", json=body)).json()
    other = await in_process.create_endpoint()
    await in_process.http.patch(f"/v1/secrets/{secret['id']}", json={"value": "rotated"})
    after = await in_process.http.get(f"/v1/endpoints/{using['id']}")
    assert after.json()["version"] == using["version"] + 1
    untouched = await in_process.http.get(f"/v1/endpoints/{other['id']}")
    assert untouched.json()["version"] == other["version"]


async def test_a_secret_something_refers_to_cannot_be_deleted(in_process: InProcess) -> None:
    secret = await make_secret(in_process)
    template = await template_with_env(in_process, {"TOKEN": "{{ RUNPOD_SECRET_hf_token }}"})
    refused = await in_process.http.delete(f"/v1/secrets/{secret['id']}")
    assert refused.status_code == 409
    assert template.json()["id"] in refused.json()["message"]
    assert len((await in_process.http.get("/v1/secrets")).json()) == 1


async def test_the_openapi_description_documents_secrets_and_user(in_process: InProcess) -> None:
    paths = (await in_process.http.get("/v1/openapi.json")).json()["paths"]
    assert {"post", "get"} <= paths["/secrets"].keys()
    assert {"get", "patch", "delete"} <= paths["/secrets/{secret_id}"].keys()
    assert "409" in paths["/secrets/{secret_id}"]["delete"]["responses"]
    assert {"get", "patch"} <= paths["/user"].keys()


async def test_the_user_sets_and_reads_their_public_key(in_process: InProcess) -> None:
    me = await in_process.http.get("/v1/user")
    assert me.status_code == 200 and me.json()["pubKey"] == ""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE me@host"
    changed = await in_process.http.patch("/v1/user", json={"pubKey": key})
    assert changed.json()["pubKey"] == key
    assert (await in_process.http.get("/v1/user")).json()["pubKey"] == key
    bad = await in_process.http.patch("/v1/user", json={"pubKey": "a\tb"})
    assert bad.status_code == 400 and bad.json()["field"] == "pubKey"
    assert (await in_process.http.get("/v1/user")).json()["pubKey"] == key


async def test_an_endpoint_referring_to_no_such_secret_is_refused(in_process: InProcess) -> None:
    template_id = await in_process.create_template()
    body = {"templateId": template_id, "computeType": "CPU", "env": {"T": "{{RUNPOD_SECRET_x}}"}}
    refused = await in_process.http.post("/v1/endpoints", json=body)
    assert refused.status_code == 400 and refused.json()["field"] == "env"
    endpoint = await in_process.create_endpoint()
    changed = await in_process.http.patch(
        f"/v1/endpoints/{endpoint['id']}", json={"env": {"T": "{{ RUNPOD_SECRET_x }}"}}
    )
    assert changed.status_code == 400 and "x" in changed.json()["message"]
