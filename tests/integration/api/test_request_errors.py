"""What ``/v1`` says of a body it cannot take, through the in-process app: a body not sent as
JSON names the header to send, and a misspelled field names the one it probably means."""

from __future__ import annotations

import json

from in_process import InProcess


async def test_a_body_without_a_json_content_type_is_told_to_send_the_header(
    in_process: InProcess,
) -> None:
    body = json.dumps({"name": "t", "imageName": "local/worker"})
    bare = await in_process.http.post("/v1/templates", content=body)
    assert bare.status_code == 400 and bare.json()["field"] == "Content-Type", bare.text
    message = bare.json()["message"]
    assert "'Content-Type: application/json'" in message and "has none" in message
    # What curl -d sends unless told otherwise.
    form = await in_process.http.post(
        "/v1/templates",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (
        form.status_code == 400 and "'application/x-www-form-urlencoded'" in form.json()["message"]
    )
    assert (await in_process.http.get("/v1/templates")).json() == []  # nothing was made


async def test_a_misspelled_field_is_answered_with_the_field_it_probably_means(
    in_process: InProcess,
) -> None:
    template = await in_process.create_template()
    refused = await in_process.http.post(
        "/v1/endpoints", json={"templateId": template, "computeType": "CPU", "workerMax": 3}
    )
    assert refused.status_code == 400 and refused.json()["field"] == "workerMax"
    assert refused.json()["message"] == "workerMax: unknown field; did you mean 'workersMax'?"
    patched = await in_process.http.patch(
        "/v1/templates/" + template, json={"dockerStartCmnd": ["python"]}
    )
    assert patched.json()["message"] == (
        "dockerStartCmnd: unknown field; did you mean 'dockerStartCmd'?"
    )


async def test_an_unknown_field_like_no_other_is_only_called_unknown(
    in_process: InProcess,
) -> None:
    refused = await in_process.http.post(
        "/v1/networkvolumes", json={"name": "v", "size": 1, "zzzzzz": True}
    )
    assert refused.status_code == 400
    assert refused.json()["message"] == "zzzzzz: unknown field"
