"""A template's ``imageName`` through ``/v1/templates`` (the in-process app, ``conftest.py``): a
name that is not a Docker image reference is a 400 at ``imageName`` saying what is wrong, at
creation and at update, and the template is left as it was."""

from __future__ import annotations

from in_process import InProcess


async def test_a_bad_image_reference_is_a_400_at_imagename_and_changes_nothing(
    in_process: InProcess,
) -> None:
    http = in_process.http
    refused = await http.post("/v1/templates", json={"name": "t", "imageName": "My Image:v1"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["field"] == "imageName"
    assert "not a valid image reference" in refused.json()["message"]
    assert (await http.get("/v1/templates")).json() == []

    created = await http.post(
        "/v1/templates", json={"name": "t", "imageName": "ghcr.io/team/worker:v1"}
    )
    assert created.status_code == 200, created.text
    template_id = created.json()["id"]
    refused = await http.post(
        f"/v1/templates/{template_id}/update", json={"imageName": "ghcr.io/Team/worker"}
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["field"] == "imageName"
    assert "must be lowercase" in refused.json()["message"]
    kept = await http.get(f"/v1/templates/{template_id}")
    assert kept.json()["imageName"] == "ghcr.io/team/worker:v1"
