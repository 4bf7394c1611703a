"""A container registry auth looked up by something that cannot be its id, through the
in-process app: 400 "invalid ID supplied", as the specification answers it, where an id of the
right shape that names none is still a 404."""

from __future__ import annotations

import pytest

from in_process import InProcess


@pytest.mark.parametrize("bad", ["my-registry", "My%20Registry", "ABCDEF", "a" * 65])
async def test_a_malformed_registry_auth_id_is_an_invalid_id_not_a_missing_one(
    in_process: InProcess, bad: str
) -> None:
    for method in ("GET", "DELETE"):
        answer = await in_process.http.request(method, f"/v1/containerregistryauth/{bad}")
        assert answer.status_code == 400, (method, answer.text)
        assert answer.json()["message"].startswith("invalid ID supplied")
        assert answer.json()["field"] == "id"


async def test_a_well_formed_id_that_names_no_auth_is_not_found(in_process: InProcess) -> None:
    answer = await in_process.http.get("/v1/containerregistryauth/abc123def456gh")
    assert answer.status_code == 404
    assert answer.json()["message"] == "container registry auth not found"


async def test_the_ids_skiff_makes_are_well_formed(in_process: InProcess) -> None:
    made = await in_process.http.post(
        "/v1/containerregistryauth", json={"name": "r", "username": "u", "password": "p"}
    )
    auth_id = made.json()["id"]
    assert (await in_process.http.get(f"/v1/containerregistryauth/{auth_id}")).status_code == 200
    deleted = await in_process.http.delete(f"/v1/containerregistryauth/{auth_id}")
    assert deleted.status_code == 204


async def test_the_openapi_description_documents_the_400(in_process: InProcess) -> None:
    schema = (await in_process.http.get("/v1/openapi.json")).json()
    answers = schema["paths"]["/containerregistryauth/{auth_id}"]["get"]["responses"]
    assert "invalid ID supplied" in answers["400"]["description"]
