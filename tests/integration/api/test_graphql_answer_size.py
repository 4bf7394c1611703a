"""What one GraphQL query's answer may hold (``graphql_limits.Answer``): a list's items times
the fields asked of each, counted as the lists resolve. Every other limit counts a list's
fields once; without this one, 50 aliases of a user's endpoints asked for tens of megabytes
and held the event loop for seconds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from in_process import ADMIN_KEY, InProcess, running
from skiff.api.graphql_limits import MAX_ANSWER_FIELDS, Answer, FieldBudgets, fields_asked
from skiff.clock import ManualClock
from skiff.domain.endpoints import EndpointCreate
from skiff.domain.users import User

ENDPOINTS = 300
FIELDS = "id name gpuIds workersMin workersMax idleTimeout templateId env { key value }"
#: Fields asked of each endpoint above (env's key and value count once each).
PER_ITEM = 10


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[InProcess]:
    async with running(tmp_path / "data") as made:
        yield made


async def _many_endpoints(app: InProcess) -> User:
    admin = await app.services.auth.authenticate(ADMIN_KEY)
    template_id = await app.create_template()
    for i in range(ENDPOINTS):
        create = EndpointCreate(name=f"e{i}", templateId=template_id, workersMax=0)
        await app.services.endpoints.create(admin, create)
    return admin


async def _ask(app: InProcess, query: str) -> dict[str, Any]:
    answer = await app.http.post("/graphql", json={"query": query})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_a_list_read_once_with_its_fields_is_answered(app: InProcess) -> None:
    await _many_endpoints(app)
    answer = await _ask(app, f"{{ myself {{ endpoints {{ {FIELDS} }} }} }}")
    assert "errors" not in answer, answer["errors"]
    assert len(answer["data"]["myself"]["endpoints"]) == ENDPOINTS


async def test_many_aliases_of_a_long_list_are_refused_past_the_answers_allowance(
    app: InProcess,
) -> None:
    await _many_endpoints(app)
    aliases = MAX_ANSWER_FIELDS // (ENDPOINTS * PER_ITEM) + 2
    query = " ".join(f"a{i}: endpoints {{ {FIELDS} }}" for i in range(aliases))
    answer = await _ask(app, f"{{ myself {{ {query} }} }}")
    messages = {error["message"] for error in answer["errors"]}
    assert any("more than 100,000 fields of list items" in m for m in messages), messages
    # The list is non-null, so a refused alias takes its parent with it: nothing is answered.
    assert answer["data"] is None or answer["data"]["myself"] is None


async def test_aliases_of_a_list_read_it_once(
    app: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _many_endpoints(app)
    reads: list[str] = []
    original = app.services.endpoints.all

    async def counted(user: User) -> Any:
        reads.append(user.id)
        return await original(user)

    monkeypatch.setattr(app.services.endpoints, "all", counted)
    answer = await _ask(app, "{ myself { a: endpoints { id } b: endpoints { name } } }")
    assert "errors" not in answer
    assert len(reads) == 1
    assert len(answer["data"]["myself"]["a"]) == len(answer["data"]["myself"]["b"]) == ENDPOINTS


def test_the_fields_asked_of_an_item_count_nested_ones_and_fragments() -> None:
    from graphql import FieldNode, OperationDefinitionNode, parse

    document = parse(
        "query { endpoints { id ...More env { key value } } } "
        "fragment More on Endpoint { name ... on Endpoint { gpuIds } }"
    )
    operation = document.definitions[0]
    assert isinstance(operation, OperationDefinitionNode)
    endpoints = operation.selection_set.selections[0]
    assert isinstance(endpoints, FieldNode)
    fragments = {d.name.value: d for d in document.definitions[1:]}  # type: ignore[attr-defined]
    assert fields_asked(endpoints.selection_set, fragments) == 6
    answer = Answer(most=20)
    answer.charge(3, endpoints.selection_set, fragments)
    assert answer.fields == 18
    with pytest.raises(Exception, match="more than 20 fields"):
        answer.charge(1, endpoints.selection_set, fragments)
    assert answer.fields == 18


async def test_answers_sent_back_to_back_spend_the_users_allowance(tmp_path: Path) -> None:
    """Each answer may hold 100,000 fields of list items; together a user's answers draw on an
    allowance of 200,000, filled again at 20,000 a second (on the server's clock)."""
    clock = ManualClock()
    async with running(tmp_path / "data", clock=clock) as app:
        await _many_endpoints(app)
        aliases = MAX_ANSWER_FIELDS // (ENDPOINTS * PER_ITEM)  # just within one answer
        query = " ".join(f"a{i}: endpoints {{ {FIELDS} }}" for i in range(aliases))
        big = f"{{ myself {{ {query} }} }}"
        for _ in range(2):
            assert "errors" not in await _ask(app, big)
        refused = await _ask(app, big)
        assert any("used their allowance" in e["message"] for e in refused["errors"])
        clock.advance(10)
        assert "errors" not in await _ask(app, big)


def test_a_users_allowance_fills_again_with_time() -> None:
    clock = ManualClock()
    budgets = FieldBudgets(capacity=100, per_second=10, clock=clock.now)
    budgets.spend("u1", 60)
    with pytest.raises(Exception, match="retry in 1 s"):
        budgets.spend("u1", 50)
    budgets.spend("u2", 100)  # each user has their own
    clock.advance(1)
    budgets.spend("u1", 50)
    clock.advance(100)
    budgets.spend("u1", 0)  # full again: nothing kept of it
    assert "u1" not in budgets._left
