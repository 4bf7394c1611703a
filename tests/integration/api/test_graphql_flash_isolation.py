"""What runpod-flash's GraphQL operations reach is the caller's own, on both stores: another
user's template and endpoint are neither seen, changed, deleted nor taken over by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from in_process import running_on

SAVE = """mutation ($input: EndpointInput!) {
  saveEndpoint(input: $input) { id name templateId workersMax }
}"""
TEMPLATE_NAME = "flash-template-of-some-function"


def flash_input(**more: Any) -> dict[str, Any]:
    """An endpoint with its template inline, as runpod-flash sends it."""
    return {
        "name": "live-hello",
        "instanceIds": ["cpu3c-2-4"],
        "workersMax": 1,
        "template": {"name": TEMPLATE_NAME, "imageName": "local/worker", "dockerArgs": "true"},
        **more,
    }


async def ask(client: httpx.AsyncClient, query: str, variables: Any = None) -> dict[str, Any]:
    answer = await client.post("/graphql", json={"query": query, "variables": variables})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


#: What another user tries on the owner's endpoint (``{e}``) and template (``{t}``): each is
#: answered as if the thing did not exist.
REACHES: dict[str, str] = {
    "podTemplate": "query ($t: String!) { podTemplate(id: $t) { id } }",
    "myself.endpoint": "query ($e: String!) { myself { endpoint(id: $e) { id } } }",
    "deleteEndpoint": "mutation ($e: String!) { deleteEndpoint(id: $e) }",
    "saveEndpoint with its id": (
        'mutation ($e: String!) { saveEndpoint(input: {id: $e, name: "x", workersMax: 3}) { id } }'
    ),
    "saveTemplate with its id": (
        'mutation ($t: String!) { saveTemplate(input: {id: $t, name: "x",'
        ' imageName: "evil/image"}) { id } }'
    ),
}


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
async def test_another_users_flash_template_and_endpoint_are_out_of_reach(
    store: str, tmp_path: Path
) -> None:
    async with running_on(store, tmp_path / "data") as app:
        owner = app.http
        made = (await ask(owner, SAVE, {"input": flash_input()}))["data"]["saveEndpoint"]
        issued = await app.services.auth.issue_key("bob", False, "")
        async with httpx.AsyncClient(
            transport=app.transport,
            base_url=str(owner.base_url),
            headers={"Authorization": f"Bearer {issued.key}"},
        ) as bob:
            ids = {"e": made["id"], "t": made["templateId"]}
            for what, query in REACHES.items():
                wanted = {k: v for k, v in ids.items() if f"${k}" in query}
                answer = await ask(bob, query, wanted)
                data = answer.get("data") or {}
                if "errors" in answer:
                    assert "not found" in answer["errors"][0]["message"], (what, answer)
                else:
                    assert data in ({"podTemplate": None}, {"myself": {"endpoint": None}}), (
                        what,
                        answer,
                    )
            # Bob's Flash function of the same code: his own template of that name, not hers.
            his = (await ask(bob, SAVE, {"input": flash_input()}))["data"]["saveEndpoint"]
            assert his["templateId"] != made["templateId"]

        # The owner's endpoint and template are as they were.
        endpoint = (await owner.get(f"/v1/endpoints/{made['id']}")).json()
        template = (await owner.get(f"/v1/templates/{made['templateId']}")).json()
        assert endpoint["workersMax"] == 1 and endpoint["templateId"] == made["templateId"]
        assert template["imageName"] == "local/worker" and template["name"] == TEMPLATE_NAME
