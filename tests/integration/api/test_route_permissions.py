"""Every route of every route group checks the caller's key against the permission it declares
(``@needs``, ``api/access.py``'s ``NEEDS``, GraphQL's ``OPERATION_NEEDS``): the routes are
walked, not listed here, so a route added without a declaration fails this file. A key lacking
the permission gets a 401 naming it; one holding it gets past the check (whatever the route then
answers). Both stores."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from graphql import build_schema
from starlette.routing import Mount, Route

from in_process import ADMIN_KEY, InProcess, running
from pgtest import PG_DSN, fresh_schema
from skiff.api import graphql as graphql_api
from skiff.api import lb as lb_api
from skiff.api import management
from skiff.api import v2 as v2_api
from skiff.api.needs import api_routes, need_of
from skiff.domain import keys
from skiff.domain.permissions import (
    ALL,
    READ_ONLY,
    Access,
    Kind,
    Need,
    NoKey,
    Permissions,
)

#: What the app mounts at its top level, and how this file walks each: a new mount or route
#: fails ``test_every_top_level_route_is_walked_here`` until it is added (and walked).
TOP_LEVEL = {
    "/": "no key: the server's name and links",
    "/healthz": "no key: the load balancer's probe",
    "/metrics": "no key: the scraper's",
    "/v1": "walked: its FastAPI routes",
    "/graphql": "walked: its Query and Mutation fields",
    "/v2": "walked: its declared routes",
    "/lb": "walked: its routes",
    "/console": "walked: tests/integration/api/test_console_sessions.py",
}


@dataclass
class Keys:
    app: InProcess
    endpoint_id: str
    #: kind name -> the key
    by_kind: dict[str, str]

    def client(self, kind: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=self.app.transport,
            base_url="http://skiff.test",
            headers={"Authorization": f"Bearer {self.by_kind[kind]}"},
        )


@pytest.fixture(params=["sqlite", "postgres"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[InProcess]:
    if request.param == "sqlite":
        async with running(tmp_path / "data") as made:
            yield made
    else:
        async with (
            fresh_schema() as schema,
            running(tmp_path / "data", database_url=PG_DSN, database_schema=schema) as made,
        ):
            yield made


@pytest.fixture
async def keyed(app: InProcess) -> Keys:
    endpoint_id = (await app.create_endpoint(name="walked"))["id"]
    admin = await app.services.auth.authenticate(ADMIN_KEY)
    wanted = {
        "all": ALL,
        "read": READ_ONLY,
        "restricted-read": Permissions(Kind.RESTRICTED, {endpoint_id: Access.READ}),
        "restricted-write": Permissions(Kind.RESTRICTED, {endpoint_id: Access.READ_WRITE}),
        "restricted-other": Permissions(Kind.RESTRICTED, {"otherendpoint": Access.READ_WRITE}),
    }
    made = {}
    for kind, permissions in wanted.items():
        key = keys.new_api_key()
        await app.services.auth.register_key(key, admin, kind, permissions)
        made[kind] = key
    return Keys(app, endpoint_id, made)


def _fill(path: str, endpoint_id: str) -> str:
    """A path with its parameters filled: the endpoint's, and made-up ids elsewhere."""
    path = path.replace("{endpoint_id}", endpoint_id).replace("{path:path}", "anything")
    return re.sub(r"\{[^}]+\}", "x1", path)


def _allowed(permissions: Permissions, need: Need, endpoint_id: str) -> bool:
    return permissions.missing(need.access, endpoint_id if need.endpoint_param else None) is None


PERMISSIONS = {
    "all": ALL,
    "read": READ_ONLY,
}


def _permissions_of(kind: str, endpoint_id: str) -> Permissions:
    if kind in PERMISSIONS:
        return PERMISSIONS[kind]
    granted = {
        "restricted-read": {endpoint_id: Access.READ},
        "restricted-write": {endpoint_id: Access.READ_WRITE},
        "restricted-other": {"otherendpoint": Access.READ_WRITE},
    }[kind]
    return Permissions(Kind.RESTRICTED, granted)


async def _check(
    keyed: Keys, method: str, url: str, need: Need, json: object | None = None
) -> list[str]:
    """Each kind of key on one route, all at once: the mistakes found (empty when all is as
    declared)."""
    found = await asyncio.gather(
        *(_check_kind(keyed, kind, method, url, need, json) for kind in keyed.by_kind)
    )
    return [mistake for mistakes in found for mistake in mistakes]


async def _check_kind(
    keyed: Keys, kind: str, method: str, url: str, need: Need, json: object | None
) -> list[str]:
    allowed = _allowed(_permissions_of(kind, keyed.endpoint_id), need, keyed.endpoint_id)
    async with keyed.client(kind) as client:
        sent = {"json": json} if json is not None and method in {"POST", "PUT", "PATCH"} else {}
        try:
            # A call let through may wait (a /runsync, a stream, a load-balancing request with
            # no worker, an OpenAI route with no worker): past the check is all this needs to
            # see, which is why the kinds (and the job routes) are tried side by side.
            answer = await asyncio.wait_for(client.request(method, url, **sent), 3)  # type: ignore[arg-type]
        except TimeoutError:
            return [f"{kind} {method} {url}: not refused at once"] if not allowed else []
    wrong = []
    refused = answer.status_code == 401
    if allowed and refused:
        wrong.append(f"{kind} {method} {url}: refused ({answer.text[:200]})")
    if not allowed and (not refused or "lacks the permission" not in answer.text):
        wrong.append(f"{kind} {method} {url}: {answer.status_code} {answer.text[:200]}")
    if not allowed and f"lacks the permission {need.access}" not in answer.text:
        wrong.append(f"{kind} {method} {url}: does not name {need.access}: {answer.text}")
    return wrong


def test_every_top_level_route_is_walked_here(app: InProcess) -> None:
    from skiff.app import create_app

    built = create_app(app.services.settings)
    paths = {r.path or "/" for r in built.routes if isinstance(r, Route | Mount)}
    assert paths == set(TOP_LEVEL), "a new top-level route: declare and walk its permissions"


async def test_every_v1_route_checks_its_declared_permission(keyed: Keys) -> None:
    routes = api_routes(management.build(keyed.app.services).routes)
    wrong: list[str] = []
    walked = 0
    for route in routes:
        need = route.need
        assert need is not None, f"{route.path} declares no permission"
        if isinstance(need, NoKey):
            continue
        for method in sorted(route.methods):
            walked += 1
            url = "/v1" + _fill(route.path, keyed.endpoint_id)
            wrong += await _check(keyed, method, url, need, json={})
    assert walked > 40
    assert not wrong, "\n".join(wrong)


async def test_every_job_route_checks_its_declared_permission(keyed: Keys) -> None:
    checks = []
    declared = v2_api.routes(keyed.app.services)
    for route in declared:
        need = need_of(route.handler)
        assert need is not None, f"{route.method} {route.path} declares no permission"
        if isinstance(need, NoKey):
            # The worker protocol takes its endpoint's token: a user's key, even `all`, is not one.
            async with keyed.client("all") as client:
                url = "/v2" + _fill(route.path, keyed.endpoint_id)
                answer = await client.request(route.method, url, timeout=30)
            assert answer.status_code == 401, (route.path, answer.text)
            continue
        url = "/v2" + _fill(route.path, keyed.endpoint_id)
        checks.append(_check(keyed, route.method, url, need, json={"input": {}}))
    wrong = [mistake for mistakes in await asyncio.gather(*checks) for mistake in mistakes]
    assert not wrong, "\n".join(wrong)


async def test_a_read_key_cannot_end_a_job_by_setting_its_ttl(keyed: Keys) -> None:
    """``/status?ttl=`` changes the job (a ttl already past ends it), so it needs read_write,
    as a cancel does: a read key is refused and the job is left as it was; a key that may
    write sets it."""
    from skiff.api.access import SET_TTL

    assert SET_TTL.access is Access.READ_WRITE
    async with keyed.client("all") as owner:
        queued = await owner.post(f"/v2/{keyed.endpoint_id}/run", json={"input": {}})
    status = f"/v2/{keyed.endpoint_id}/status/{queued.json()['id']}"
    for kind in ("read", "restricted-read", "restricted-other"):
        async with keyed.client(kind) as caller:
            refused = await caller.get(status, params={"ttl": 1})
            assert refused.status_code == 401, (kind, refused.text)
            assert "lacks the permission read_write" in refused.text
    for kind in ("read", "restricted-read"):
        async with keyed.client(kind) as reader:
            assert (await reader.get(status)).json()["status"] == "IN_QUEUE"
    async with keyed.client("restricted-write") as writer:
        assert (await writer.get(status, params={"ttl": 600_000})).status_code == 200
        assert (await writer.get(status, params={"ttl": 1})).status_code == 404
    async with keyed.client("all") as owner:
        assert (await owner.get(status)).status_code == 404


async def test_a_restricted_key_reads_its_endpoint_but_not_the_template_it_runs(
    keyed: Keys,
) -> None:
    """A template's env often holds secrets, and ``/v1/templates`` needs the account's read:
    ``includeTemplate`` asks the same, so a key restricted to the endpoint gets the endpoint
    alone; an account-wide key gets the template with it."""
    url = f"/v1/endpoints/{keyed.endpoint_id}"
    for kind in ("restricted-read", "restricted-write"):
        async with keyed.client(kind) as restricted:
            assert (await restricted.get(url)).status_code == 200
            refused = await restricted.get(url, params={"includeTemplate": "true"})
            assert refused.status_code == 401, (kind, refused.text)
            assert "lacks the permission read on the account" in refused.text
    for kind in ("read", "all"):
        async with keyed.client(kind) as reader:
            shown = await reader.get(url, params={"includeTemplate": "true"})
            assert shown.status_code == 200, (kind, shown.text)
            assert "env" in shown.json()["template"]


def test_the_job_routes_need_what_a_user_expects() -> None:
    """Reading (status, stream, health, the recent jobs) is read; everything that makes or
    changes a job, and every OpenAI call, is read_write."""
    from skiff.api.access import NEEDS

    reads = {op for op, need in NEEDS.items() if need.access is Access.READ}
    assert reads == {"status", "stream", "health", "requests"}
    assert all(need.endpoint_param == "endpoint_id" for need in NEEDS.values())


async def test_every_graphql_operation_checks_its_permission(keyed: Keys) -> None:
    schema = build_schema(graphql_api.SDL)
    wrong: list[str] = []
    for kind_name, root in (("query", schema.query_type), ("mutation", schema.mutation_type)):
        assert root is not None
        need = graphql_api.OPERATION_NEEDS[
            {
                "query": graphql_api.OperationType.QUERY,
                "mutation": graphql_api.OperationType.MUTATION,
            }[kind_name]
        ]
        for field in root.fields:
            # The check comes before the schema's validation, so a bare field is enough.
            body = {"query": f"{kind_name} Walked {{ {field} }}", "operationName": "Walked"}
            wrong += await _check(keyed, "POST", "/graphql", need, json=body)
    assert not wrong, "\n".join(wrong)
    assert graphql_api.OPERATION_NEEDS[graphql_api.OperationType.MUTATION].access is (
        Access.READ_WRITE
    )


async def test_every_load_balancing_route_checks_its_permission(keyed: Keys) -> None:
    wrong: list[str] = []
    for route in lb_api.build(keyed.app.services).app.routes:
        assert isinstance(route, Route)
        need = need_of(route.endpoint)
        assert isinstance(need, Need), f"{route.path} declares no permission"
        for method in ("GET", "POST"):
            url = "/lb" + _fill(route.path, keyed.endpoint_id)
            wrong += await _check(keyed, method, url, need, json={})
    assert not wrong, "\n".join(wrong)
