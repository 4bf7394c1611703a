"""``SKIFF_MAX_PER_USER``: a user holds at most so many of each kind of resource, through
every interface that makes one (``/v1``, GraphQL), and may make another once one is gone; an
administrator is not bounded."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from in_process import InProcess, running

MOST = 3
_names = itertools.count()

#: Each kind's /v1 collection and a body that makes one.
BODIES: dict[str, Callable[[], dict[str, Any]]] = {
    "templates": lambda: {"name": f"t{next(_names)}", "imageName": "local/worker"},
    "networkvolumes": lambda: {"name": f"v{next(_names)}", "size": 1},
    "secrets": lambda: {"name": f"s{next(_names)}", "value": "x"},
    "containerregistryauth": lambda: {"name": f"r{next(_names)}", "username": "u", "password": "p"},
    "apikeys": lambda: {"name": f"k{next(_names)}", "permissions": "all"},
}


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[InProcess]:
    async with running(tmp_path / "data", max_per_user=MOST) as made:
        yield made


async def _bob(app: InProcess) -> httpx.AsyncClient:
    key, _ = await app.new_user("bob")
    return app.as_user(key)


@pytest.mark.parametrize("kind", sorted(BODIES))
async def test_a_user_holds_at_most_so_many_of_each_kind(app: InProcess, kind: str) -> None:
    async with await _bob(app) as bob:
        made = 0
        while (answer := await bob.post(f"/v1/{kind}", json=BODIES[kind]())).status_code == 200:
            made += 1
            assert made <= MOST, f"{kind}: more than {MOST} made"
        assert answer.status_code == 409, answer.text
        assert f"holds {MOST} " in answer.json()["message"]
        assert "SKIFF_MAX_PER_USER" in answer.json()["message"]
        held = (await bob.get(f"/v1/{kind}")).json()
        # Bob's own key, made with his account, is one of his API keys.
        assert len(held) == MOST, held


async def test_one_deleted_makes_room_for_another(app: InProcess) -> None:
    async with await _bob(app) as bob:
        template = BODIES["templates"]
        ids = [(await bob.post("/v1/templates", json=template())).json()["id"] for _ in range(MOST)]
        assert (await bob.post("/v1/templates", json=template())).status_code == 409
        assert (await bob.delete(f"/v1/templates/{ids[0]}")).status_code in (200, 204)
        assert (await bob.post("/v1/templates", json=template())).status_code == 200


async def test_endpoints_are_bounded_and_graphql_is_too(app: InProcess) -> None:
    async with await _bob(app) as bob:
        template_id = (await bob.post("/v1/templates", json=BODIES["templates"]())).json()["id"]
        body = {"templateId": template_id, "computeType": "CPU", "workersMax": 0}
        for _ in range(MOST):
            assert (await bob.post("/v1/endpoints", json=body)).status_code == 200
        refused = await bob.post("/v1/endpoints", json=body)
        assert refused.status_code == 409 and "endpoints" in refused.json()["message"]
        saved = await bob.post(
            "/graphql",
            json={
                "query": f'mutation {{ saveEndpoint(input: {{name: "g", templateId: '
                f'"{template_id}", gpuIds: "CPU", workersMax: 0}}) {{ id }} }}'
            },
        )
        assert "SKIFF_MAX_PER_USER" in saved.json()["errors"][0]["message"], saved.text
    assert len(await app.services.store.list_endpoints(None)) == MOST


async def test_an_administrator_is_not_bounded(app: InProcess) -> None:
    for _ in range(MOST + 2):
        made = await app.http.post("/v1/templates", json=BODIES["templates"]())
        assert made.status_code == 200, made.text
